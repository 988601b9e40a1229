"""The method matrix's quoted text: the answer paragraph, the papers' claims and the recommendations that "Which
method?" and the README quote, with the tables of tables.py, each rendered from bench/results/method_matrix/ alone
(bench/claims/ registers CLAIMS, so the pages cannot outlive the result files). Every sentence that compares methods
names its rows and how many of the planned seeds are in, and ranks two arms only when their seeds separate them; an
arm without a finished run says so.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from functools import partial
from pathlib import Path

from bench.method_matrix.arms import METHODS, TASKS, TRAINING_SECONDS
from bench.method_matrix.measure import SCORED_BUDGET
from bench.method_matrix.rows import (
    STUDY,
    Arm,
    arm,
    arms,
    gap_beyond_spread,
    machine,
    memory,
    paired_gain,
    separated,
    sft_alone,
    start,
)
from bench.method_matrix.run import plan
from bench.method_matrix.spread import SPREAD_PAIRS, spread_answer, spread_row
from bench.method_matrix.tables import (
    ES_ALONE,
    GRPO_METHODS,
    STEP_MATCHED_MARK,
    TASK_NAMES,
    VARIANT_NAMES,
    budget_table,
    cut_text,
    finished_arms,
    mean_text,
    memory_table,
    named,
    probe_cpu_note,
    readme_table,
    seeds_text,
    task_table,
    tuning_table,
)

NOT_SEPARATED = ("not yet separated (one seed, a gap within the seed spread, or a paired difference whose 95% "
                 "interval holds 0) from")


# An arm whose answers the scored budget cut (cut_text) may hold right answers past it: no ranking rests on it.
CUT_NOT_RANKED = "not ranked, as the scored budget cut answers (the budget table), against"


def ranking(found: list[Arm]) -> str:
    """Best arm first; 'ahead of' only when the two are separated (separated) and neither arm's answers were cut."""
    ordered = sorted(found, key=lambda item: -item.mean)
    best, second = ordered[0], ordered[1]
    if cut_text(best) or cut_text(second):
        relation = CUT_NOT_RANKED
    else:
        relation = "ahead of" if separated(best, second) else NOT_SEPARATED
    return f"{named(best)}, {relation} {named(second)}"


def _kl_separated(first: Arm, second: Arm) -> bool:
    """Whether two arms' KL to the start differ beyond seed noise: each has two seeds or more, the gap exceeds both
    arms' seed spread, and the paired per-seed difference over the seeds both ran has a 95% t interval without 0."""
    from scipy.stats import t as t_distribution

    first_kl, second_kl = ({run.seed: run.mean_kl for run in item.runs} for item in (first, second))
    shared = sorted(first_kl.keys() & second_kl.keys())
    if len(shared) < 2 or not gap_beyond_spread(list(first_kl.values()), list(second_kl.values())):
        return False
    differences = [first_kl[seed] - second_kl[seed] for seed in shared]
    half = t_distribution.ppf(0.975, len(shared) - 1) * statistics.stdev(differences) / len(shared) ** 0.5
    return abs(statistics.mean(differences)) > half


def _kept_best(found: list[Arm]) -> str:
    """The arm with the lowest KL to the start, with every arm not separated from it (_kl_separated)."""
    kept = sorted(found, key=lambda item: item.mean_kl)
    best, rest = kept[0], kept[1:]
    tied = [item for item in rest if not _kl_separated(best, item)]
    if not tied:
        return f"{best.label} ({best.mean_kl:.4f}), ahead of {rest[0].label} ({rest[0].mean_kl:.4f})"
    names = [f"{item.label} ({item.mean_kl:.4f})" for item in tied]
    names = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return f"{best.label} ({best.mean_kl:.4f}), {NOT_SEPARATED_KL} {names}"


NOT_SEPARATED_KL = ("not yet separated (one seed, a gap within the seed spread, or a paired per-seed difference "
                    "whose 95% interval holds 0) from")


def _probes_sentence(results: Path) -> str | None:
    """Least and most peak RSS over the methods' default memory probes; the most, where it is GRPO, also with its
    loss in four slices; a partial set of probes says how many methods are in. None before any probe ran."""
    probes = memory(results)
    rows = [row for row in probes if row["variant"] == "default"]  # each method as a user runs it
    if not rows:
        return None
    least = min(rows, key=lambda row: row["peak_rss_mib"])
    most = max(rows, key=lambda row: row["peak_rss_mib"])
    sliced = {row["method"]: row for row in probes if row["variant"] == "accumulation4"}
    most_text = f"{most['peak_rss_mib']:,.0f} MiB"
    if most["method"] in sliced:
        most_text += f"; {sliced[most['method']]['peak_rss_mib']:,.0f} MiB with `gradient_accumulation_steps: 4`"
    text = (f"{least['label']} ({least['peak_rss_mib']:,.0f} MiB peak RSS in its memory probe"
            f"{probe_cpu_note(results, probes)}); most: "
            f"{most['label']} ({most_text})")
    if len(rows) < len(METHODS):
        text += f" ({len(rows)} of the {len(METHODS)} methods' memory probes have run: least and most so far)"
    return text


def _memory_sentence(results: Path) -> str:
    probes = _probes_sentence(results)
    if probes is not None:
        return probes
    found = finished_arms("arithmetic", results)
    if not found:
        return "not measured yet"
    least = min(found, key=lambda item: item.peak_rss_mib)
    most = max(found, key=lambda item: item.peak_rss_mib)
    return (f"{least.label} ({least.peak_rss_mib:,.0f} MiB peak RSS of the timed runs; the memory probes have not run "
            f"yet); most: {most.label} ({most.peak_rss_mib:,.0f} MiB)")


def answer(results: Path = STUDY) -> str:
    """The answer, from the rows: which method learns most at equal CPU time, which keeps the base best, which needs
    least memory, and whether full-es or lora-es is the better ES on a CPU (a list, one line per question)."""
    lines = ["", ""]
    for task in TASKS:
        found = finished_arms(task, results)
        ranked = ranking(found) if len(found) >= 2 else "fewer than two methods have finished runs yet"
        lines.append(f"- **Learns most, {TASK_NAMES[task]}**: {ranked}.")
    found = finished_arms("arithmetic", results)
    if len(found) >= 2:
        moved = max(found, key=lambda item: item.mean_kl)
        most = f"; moves it most: {moved.label} ({moved.mean_kl:.3f})" if len(found) > 2 else ""
        lines.append(f"- **Keeps the base best** (lowest KL to the start on other tasks' prompts, 2-digit addition): "
                     f"{_kept_best(found)}{most}.")
    lines.append(f"- **Least memory**: {_memory_sentence(results)}.")
    full, lora = arm(results, "arithmetic", "full_es"), arm(results, "arithmetic", "es_lora")
    if full.runs and lora.runs:
        lines.append(f"- **full-es or lora-es, on a CPU** (2-digit addition): {ranking([full, lora])}; KL to the "
                     f"start {full.mean_kl:.3f} (full-es) and {lora.mean_kl:.3f} (lora-es).")
    else:
        lines.append("- **full-es or lora-es, on a CPU**: both need finished runs on 2-digit addition first.")
    return "\n".join(lines) + "\n\n"


def _verdict(ours: Arm, theirs: Arm) -> str:
    """held / did not hold / not separated (separated), for 'ours beats theirs' by mean over seeds; open while the
    scored budget cuts either arm's answers."""
    if cut_text(ours) or cut_text(theirs):
        return "open: the scored budget cut answers"
    if not separated(ours, theirs):
        return "not separated yet"
    return "held" if ours.mean > theirs.mean else "did not hold"


def _inference_memory_row(results: Path) -> str | None:
    """'ES needs only inference memory' against grpo-full at its lowest: full-es as a user runs it (with
    its fp32 drift copy) must stay under GRPO both in one micro-batch and with its loss in four slices."""
    rows = memory(results)
    probes = {(row["method"], row["variant"]): row for row in rows}
    es = probes.get(("full_es", "default"))
    grpo = [probes[key] for key in (("grpo_full", "default"), ("grpo_full", "accumulation4")) if key in probes]
    if es is None or not grpo:
        return None
    grpo_text = ", ".join(f"{row['peak_rss_mib']:,.0f} MiB ({VARIANT_NAMES[row['variant']]})" for row in grpo)
    if len(grpo) < 2:
        held = "not every probe in yet"
    else:
        held = "held" if es["peak_rss_mib"] < min(row["peak_rss_mib"] for row in grpo) else "did not hold"
    return (f"| ES needs only inference memory (ES at Scale) | full-es {es['peak_rss_mib']:,.0f} MiB (with its drift "
            f"copy); grpo-full {grpo_text} (memory probes{probe_cpu_note(results, rows)}) | {held} |")


def _evolution_row(results: Path, task: str, essa: Arm) -> str | None:
    """'ESSA's evolution adds to its SFT': ESSA against its SFT measured alone (tables' SFT-alone row), the paired
    gain pooled over the seeds both have (the same held-out questions per seed); None where no SFT alone ran."""
    alone = {run.seed: run for run in sft_alone(results, task)}
    shared = [(run, alone[run.seed]) for run in essa.runs if run.seed in alone]
    if not shared:
        return None
    mean, low, high = paired_gain("".join(run.heldout["correct"] for run, _ in shared),
                                  "".join(sft.heldout["correct"] for _, sft in shared))
    verdict = ("held" if low > 0 else "did not hold" if high < 0 else "not separated") if len(shared) >= 2 else \
        "one seed only"
    sft_mean = statistics.mean(sft.accuracy for _, sft in shared)
    return (f"| ESSA's evolution adds to its SFT warm start (ESSA), {TASK_NAMES[task]} | {named(essa)}; its SFT "
            f"alone {sft_mean:.1f}%, {len(shared)} of {essa.planned} seeds; paired gain {mean:+.1f} points "
            f"[{low:+.1f}, {high:+.1f}] | {verdict} |")


def papers_table(results: Path = STUDY) -> str:
    """'Where the papers' claims held', each row from the matrix's rows (best ES arm against best GRPO arm, and
    so on); a claim whose rows have not run says so."""
    lines = ["", "", "| claim (paper) | rows compared | here |", "|---|---|---|"]
    for task in TASKS:
        found = {item.method: item for item in finished_arms(task, results)}
        es = [found[m] for m in ES_ALONE if m in found]  # ESSA (SFT + ES) has its own rows
        grpo = [found[m] for m in GRPO_METHODS if m in found]
        if es and grpo:
            best_es, best_grpo = max(es, key=lambda item: item.mean), max(grpo, key=lambda item: item.mean)
            lines.append(f"| ES beats GRPO at equal compute (ES at Scale), {TASK_NAMES[task]} | best ES alone "
                         f"{named(best_es)}; best GRPO {named(best_grpo)} | {_verdict(best_es, best_grpo)} |")
            for es_method, grpo_method, moved in SPREAD_PAIRS:
                if es_method in found and grpo_method in found:
                    lines.append(spread_row(task, found[es_method], found[grpo_method], moved))
        if "essa" in found and "grpo_lora" in found:
            lines.append(f"| ESSA beats grpo-lora (ESSA), {TASK_NAMES[task]} | {named(found['essa'])}; "
                         f"{named(found['grpo_lora'])} | {_verdict(found['essa'], found['grpo_lora'])} |")
        if "essa" in found and (row := _evolution_row(results, task, found["essa"])):
            lines.append(row)
    found = {item.method: item for item in finished_arms("arithmetic", results)}
    if "lowrank" in found and "full_es" in found:
        rates = {m: found[m].mean_of("steps") * METHODS[m]["keys"]["population_size"] / TRAINING_SECONDS
                 for m in ("lowrank", "full_es")}
        held = "held" if rates["lowrank"] > rates["full_es"] else "did not hold"
        lines.append(f"| low-rank members are cheaper to evaluate (EGGROLL) | members evaluated per training second: "
                     f"lowrank-es {rates['lowrank']:.3f}, full-es {rates['full_es']:.3f} (2-digit addition) | "
                     f"{held} |")
    memory_row = _inference_memory_row(results)
    if memory_row:
        lines.append(memory_row)
    if len(lines) == 3:
        lines.append("| every claim | not enough finished runs yet | |")
    return "\n".join(lines) + "\n\n"


def recommendations(results: Path = STUDY) -> str:
    """Which method to pick, each recommendation naming the rows it stands on; marked provisional until every arm
    has all its seeds."""
    found = finished_arms("arithmetic", results)
    if len(found) < 2:
        return "\n\n- not enough finished runs to recommend anything yet\n\n"
    lines = ["", ""]
    runs = sum(len(item.runs) for item in arms(results, "arithmetic"))
    planned = len(METHODS) * len(TASKS["arithmetic"]["seeds"])
    if runs < planned:
        lines.append(f"- *Provisional*: {runs} of the {planned} runs on 2-digit addition are in; each line below "
                     "follows the rows as they stand.")
    lines.append(f"- **Most accuracy for the CPU time**: {ranking(found)} (2-digit addition rows).")
    lines.append(f"- **Keep the base model's behaviour elsewhere** (lowest KL to the start): {_kept_best(found)} "
                 "(2-digit addition rows).")
    # ESSA evolves an SFT adapter, and that SFT is a backward pass: it is named beside, not ranked, here
    free = [item for item in found if item.method in ES_ALONE]
    essa = next((item for item in found if item.method == "essa"), None)
    alone = sft_alone(results, "arithmetic")
    sft_text = (f" (its SFT alone: {statistics.mean(run.accuracy for run in alone):.1f}%, {len(alone)} seeds; the "
                "evolution's own gain is the papers' table's row)" if alone else "")
    beside = (f"; ESSA, which starts from an SFT adapter (a backward pass, or an adapter you already have), "
              f"reached {mean_text(essa)}, {seeds_text(essa)}{sft_text}" if essa else "")
    if len(free) >= 2:
        lines.append(f"- **No room for a backward pass (no gradients at all)**: {ranking(free)}{beside} (2-digit "
                     "addition rows).")
    elif free:
        lines.append(f"- **No room for a backward pass (no gradients at all)**: {named(free[0])}, the only such ES "
                     f"arm in so far{beside}.")
    probes = _probes_sentence(results)
    if probes is not None:
        lines.append(f"- **Least memory**: {probes} (memory probe rows).")
    countdown = finished_arms("countdown", results)
    if len(countdown) >= 2:
        lines.append(f"- **A task that needs a warm start (Countdown)**: {_over_the_start(results, countdown)} "
                     "(Countdown rows).")
    return "\n".join(lines) + "\n\n"


def _over_the_start(results: Path, found: list[Arm]) -> str:
    """The ranking, only where the best arm gained over its start beyond noise (the paired per-question gain pooled
    over its seeds, each against its own seed's start, has a 95% interval above 0); else that no arm did."""
    best = max((item for item in found if not cut_text(item)), key=lambda item: item.mean, default=None)
    if best is None:
        return ranking(found)
    pairs = [(run.heldout["correct"], before["correct"]) for run in best.runs
             if (before := start(results, best.task, run.seed)) is not None]
    mean, low, high = paired_gain("".join(after for after, _ in pairs), "".join(before for _, before in pairs))
    if low > 0:
        return ranking(found)
    return (f"no arm is separated from its start: the best uncut arm, {named(best)}, gained {mean:+.1f} points over "
            f"it [{low:+.1f}, {high:+.1f}] pooled over its seeds; nothing is recommended over the warm start alone")


def setup(results: Path = STUDY) -> str:
    """What the runs ran on: CPU model, threads, dtype, torch, the training time (each file keeps its commit: the page
    names none); and the runs that
    took their arm's steps on another machine type instead (tables' step-matched mark)."""
    seen = machine(results)
    text = (f"{TRAINING_SECONDS / 60:.0f} minutes of training per run at {', '.join(map(str, seen['threads']))} CPU "
            f"thread, two runs at a time, float32, on {' / '.join(seen['cpu'])} (torch {', '.join(seen['torch'])}; "
            "each result file records its commit)")
    matched = [(found.label, run) for task in TASKS for found in arms(results, task) for run in found.runs
               if run.step_matched]
    if matched:
        text += (f"; {len(matched)} runs instead took the median steps of their arm's seeds there, on "
                 f"{' / '.join(sorted({run.cpu for _, run in matched}))} (step-matched, marked {STEP_MATCHED_MARK}: "
                 + ", ".join(f"{label} seed {run.seed}" for label, run in matched) + ")")
    return text


def status(results: Path = STUDY) -> str:
    """How much of the study is in."""
    jobs = [job for job in plan(results) if job["kind"] != "rescore"]
    done = sum((results / job["path"]).is_file() for job in jobs)
    main = [job for job in jobs if job.get("phase") == "main"]
    finished = sum((results / job["path"]).is_file() for job in main)
    shown = sum(len(found.runs) for task in TASKS for found in arms(results, task))
    waiting = f" ({finished - shown} of them wait to be measured again at {SCORED_BUDGET} tokens)" if shown < finished \
        else ""
    return (f"{done} of {len(jobs)} jobs of the study have run, {finished} of its {len(main)} main runs{waiting}; "
            "every sentence below says how many seeds its rows have")


def validation_text(task: str, results: Path = STUDY) -> str:
    """Each finished arm's accuracy on its runs' own validation split (at training's budget) before and after
    training, per seed: whether training itself moved the score the held-out table reads, up or down."""
    finished = finished_arms(task, results)
    parts = [f"{found.label} " + ", ".join(
        f"{100 * run.data['training']['validation_before']:.1f}% -> "
        f"{100 * run.data['training']['validation_after']:.1f}% (seed {run.seed})" for run in found.runs)
        for found in finished]
    counts = sorted({run.data["training"]["keys"]["num_eval"] for found in finished for run in found.runs})
    return ("; ".join(parts) + f" ({'/'.join(map(str, counts))} validation questions per run)") if parts \
        else "no run has finished yet"


def lowrank_answer(results: Path = STUDY) -> str:
    """The current answer to "does lowrank-es learn faster than full-es on a CPU?" (matched, equal time)."""
    lowrank, full = arm(results, "arithmetic", "lowrank"), arm(results, "arithmetic", "full_es")
    verdict = "separated" if separated(lowrank, full) else "not separated"
    return (f"on 2-digit addition, matched (each at its own tuned setting, equal training time, 48 tokens): "
            f"{lowrank.label} {mean_text(lowrank)} against {full.label} {mean_text(full)}, {seeds_text(lowrank)} "
            f"({verdict})")


def es_arms_answer(results: Path = STUDY) -> str:
    """Which ES arm that starts from the base model (no SFT warm start) learned most on 2-digit addition at equal
    training time, and whether the seeds separate it from the next (ranking)."""
    found = [item for item in arms(results, "arithmetic") if item.runs and item.method != "essa"
             and METHODS[item.method]["command"] == "train"]
    if len(found) < 2:
        return "fewer than two ES arms have run on 2-digit addition: not ranked yet"
    return (f"among the ES arms that start from the base model ({', '.join(item.label for item in found)}), on "
            f"2-digit addition at equal training time: {ranking(found)}")


CLAIMS: dict[str, Callable[[], str]] = {
    "matrix-status": status, "matrix-setup": setup, "matrix-tuning-table": tuning_table,
    "matrix-arithmetic-table": partial(task_table, "arithmetic"),
    "matrix-countdown-table": partial(task_table, "countdown"),
    "matrix-budget-arithmetic": partial(budget_table, "arithmetic"),
    "matrix-budget-countdown": partial(budget_table, "countdown"), "matrix-memory-table": memory_table,
    "matrix-validation-countdown": partial(validation_text, "countdown"),
    "matrix-answer": answer, "matrix-papers-table": papers_table, "matrix-recommendations": recommendations,
    "matrix-readme-table": readme_table, "matrix-spread-answer": spread_answer,
    "matrix-lowrank-answer": lowrank_answer, "matrix-es-arms-answer": es_arms_answer,
}

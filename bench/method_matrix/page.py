"""The method matrix's quoted text: the tables, the answer paragraph, the papers' claims and the recommendations
that "Which method?" and the README quote, each rendered from bench/results/method_matrix/ alone (bench/claims/
registers them as claims, so the pages cannot outlive the result files). Every sentence that compares methods
names its rows and how many of the planned seeds are in; an arm without a finished run says so.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from functools import partial
from pathlib import Path

from bench.method_matrix.arms import METHODS, TASKS, TRAINING_SECONDS, TUNING_SEED, TUNING_SETTINGS
from bench.method_matrix.measure import RETENTION_NUM_EVAL, SCORED_BUDGET
from bench.method_matrix.rows import STUDY, Arm, Run, arm, arms, gain, load, machine, memory, paired_gain, start
from bench.method_matrix.run import plan, selection

TASK_NAMES = {"arithmetic": "2-digit addition", "countdown": "Countdown (3 numbers, from the SFT warm start)"}
IFEVAL_STRICT = "retain/ifeval/prompt_strict"
ES_METHODS = ("full_es", "es_lora", "lowrank", "essa")
GRPO_METHODS = ("grpo_lora", "grpo_full")


def _mean_text(found: Arm) -> str:
    return _accuracy_text(found.accuracies)


def _accuracy_text(accuracies: list[float]) -> str:
    """Mean accuracy over seeds, with its std once there are two."""
    spread = f" (std {statistics.stdev(accuracies):.1f})" if len(accuracies) > 1 else ""
    return f"{statistics.mean(accuracies):.1f}%{spread}"


def _per_seed_text(runs: list[Run]) -> str:
    return "; ".join(f"{run.seed}: {run.accuracy:.1f}% [{run.interval[0]:.1f}, {run.interval[1]:.1f}]" for run in runs)


def _seeds_text(found: Arm) -> str:
    return f"{len(found.runs)} of {found.planned} seeds"


def _named(found: Arm) -> str:
    return f"{found.label} {_mean_text(found)}, {_seeds_text(found)}"


def _finished(task: str, results: Path = STUDY) -> list[Arm]:
    return [found for found in arms(results, task) if found.runs]


# Below this share of answers ended within the scored budget, an arm's accuracy is flagged: the budget cuts its
# answers, so its number says "no answer within the budget", not "a wrong answer".
ENDED_SHARE_FLAG = 0.9


def _cut_text(found: Arm) -> str:
    """' (answers cut: ...)' when the scored budget ended fewer than ENDED_SHARE_FLAG of the arm's answers."""
    runs = [run for run in found.runs if "ended_by_budget" in run.heldout]
    if not runs:
        return ""
    scored = str(runs[0].heldout["scored_budget"])
    ended = sum(run.heldout["ended_by_budget"][scored] for run in runs) / len(runs)
    return (f" (answers cut: {100 * ended:.0f}% ended within {scored} tokens)" if ended < ENDED_SHARE_FLAG
            else "")


def task_table(task: str, results: Path = STUDY) -> str:
    """One task's table: every arm's held-out accuracy (mean, std, per-seed 95% intervals), its gain over the
    start, the steps made in the equal training time, the training process's peak memory, and the KL to the start
    on other tasks' prompts."""
    lines = ["", "", "| method | seeds | held-out accuracy, mean (std) | per seed, 95% interval | gain over the start, "
             "per seed | steps in the time | peak RSS (ESSA: its SFT's if higher) | KL to the start (conciseness / "
             f"IFEval) | IFEval prompt-level strict (n = {RETENTION_NUM_EVAL}) |", "|---" * 9 + "|"]
    lines += _start_rows(task, results)
    for found in arms(results, task):
        if not found.runs:
            lines.append(f"| {found.label} | 0 of {found.planned} | not run yet | | | | | | |")
            continue
        gains = [(run.seed, gain(results, run, task)) for run in found.runs]
        gain_text = "; ".join(f"{seed}: {value[0]:+.1f} [{value[1]:+.1f}, {value[2]:+.1f}]" for seed, value in gains
                              if value is not None) or "start not measured at this budget yet"
        kl = " / ".join(f"{sum(run.kl(name) for run in found.runs) / len(found.runs):.3f}"
                        for name in ("conciseness", "ifeval"))
        ifeval = sum(run.heldout["retention"][IFEVAL_STRICT] for run in found.runs) / len(found.runs)
        accuracy = _mean_text(found) + _cut_text(found)
        lines.append(f"| {found.label} | {len(found.runs)} of {found.planned} | {accuracy} | "
                     f"{_per_seed_text(found.runs)} | "
                     f"{gain_text} | {found.mean_of('steps'):.0f} | {found.peak_rss_mib:,.0f} MiB | "
                     f"{kl} | {100 * ifeval:.1f}% |")
    return "\n".join(lines) + "\n\n"


def _start_rows(task: str, results: Path) -> list[str]:
    """The task table's row of the model its runs start from: the base model, or on a warm-start task each seed's
    SFT model (its accuracy per seed, as a method's)."""
    seeds = TASKS[task]["seeds"]
    if not TASKS[task]["warm_start"]:
        first = start(results, task, seeds[0])
        if first is None:
            return []
        measured = first["scored_budget"] == SCORED_BUDGET
        ifeval = first.get("retention", {}).get(IFEVAL_STRICT)
        return ["| base model (the start) | | "
                + (f"{100 * first['accuracy']:.1f}% | n = {first['n']}" if measured else
                   f"not yet measured at {SCORED_BUDGET} tokens |") + " | | | | 0 | "
                + (f"{100 * ifeval:.1f}% |" if ifeval is not None else " |")]
    found = [Run(seed, load(results, f"warm_start/{task}/sft_seed{seed}.json"), record) for seed in seeds
             if (record := start(results, task, seed)) is not None and record["scored_budget"] == SCORED_BUDGET]
    if not found:
        return [f"| SFT warm start (the start) | 0 of {len(seeds)} | not run yet | | | | | 0 | |"]
    ifeval = [run.heldout["retention"][IFEVAL_STRICT] for run in found
              if IFEVAL_STRICT in run.heldout.get("retention", {})]
    return [f"| SFT warm start (the start) | {len(found)} of {len(seeds)} | "
            f"{_accuracy_text([run.accuracy for run in found])} | {_per_seed_text(found)} | | | | 0 | "
            + (f"{100 * statistics.mean(ifeval):.1f}% |" if ifeval else " |")]


def budget_table(task: str, results: Path = STUDY) -> str:
    """Accuracy of each arm (mean over its seeds) at the budgets measured, and the share of answers that had ended
    within the scored budget: whether the scored budget cuts answers."""
    found = [item for item in _finished(task, results) if "ended_by_budget" in item.runs[0].heldout]
    if not found:
        return "\n\nno run has been measured at growing budgets yet\n\n"
    budgets = sorted(found[0].runs[0].heldout["accuracy_by_budget"], key=int)
    scored = str(found[0].runs[0].heldout["scored_budget"])
    lines = ["", "", "| method | " + " | ".join(f"{budget} tokens" for budget in budgets)
             + f" | answers ended within {scored} |", "|---|" + "---|" * (len(budgets) + 1)]
    for item in found:
        runs = [run for run in item.runs if "ended_by_budget" in run.heldout]
        cells = [f"{100 * sum(run.heldout['accuracy_by_budget'][b] for run in runs) / len(runs):.1f}%"
                 for b in budgets]
        ended = sum(run.heldout["ended_by_budget"][scored] for run in runs) / len(runs)
        lines.append(f"| {item.label} | " + " | ".join(cells) + f" | {100 * ended:.1f}% |")
    return "\n".join(lines) + "\n\n"


def memory_table(results: Path = STUDY) -> str:
    """The memory probes: each method's peak resident memory in the study's dtype, and the copies of the weights
    it holds besides activations."""
    rows = memory(results)
    if not rows:
        return "\n\nthe memory probes have not run yet (they run after the main runs)\n\n"
    lines = ["", "", "| method | variant | peak RSS | copies of the weights held |", "|---|---|---|---|"]
    for row in rows:
        copies = ", ".join(f"{name.replace('_', ' ')} {size:,.0f} MiB" for name, size in row["weights"].items())
        if row["sft_peak_rss_mib"]:
            copies += f" (its SFT first: {row['sft_peak_rss_mib']:,.0f} MiB peak RSS)"
        lines.append(f"| {row['label']} | {row['variant']} | {row['peak_rss_mib']:,.0f} MiB | {copies} |")
    return "\n".join(lines) + "\n\n"


def setting_text(method: str, setting: int) -> str:
    """A tuning setting's keys as text, e.g. `sigma 0.002, learning_rate 0.008`."""
    return ", ".join(f"{key} {value:g}" if isinstance(value, float) else f"{key} {value}"
                     for key, value in METHODS[method]["grid"][setting].items())


def tuning_table(results: Path = STUDY) -> str:
    """Each method's tuning: the settings tried (the same budget for every method), the one chosen on the validation
    split with its validation accuracy before and after, and whether a one-key grid chose its edge (a better
    setting may lie beyond it)."""
    lines = ["", "", "| method | settings tried | chosen | validation accuracy, before -> after |", "|---|---|---|---|"]
    for method, spec in METHODS.items():
        chosen = selection(results, method)
        if chosen is None:
            lines.append(f"| {spec['label']} | {len(spec['grid'])} | tuning not finished | |")
            continue
        run = load(results, f"tune/arithmetic/{method}/s{chosen}_seed{TUNING_SEED}.json")["training"]
        setting = spec["grid"][chosen]
        varied = {key for values in spec["grid"] for key in values if any(values.get(key) != other.get(key)
                                                                           for other in spec["grid"])}
        edge = ""
        if len(varied) == 1:
            key = varied.pop()
            values = sorted(values[key] for values in spec["grid"])
            if setting[key] in (values[0], values[-1]):
                edge = f" (the grid's {'largest' if setting[key] == values[-1] else 'smallest'} {key})"
        lines.append(f"| {spec['label']} | {TUNING_SETTINGS} | {setting_text(method, chosen)}{edge} | "
                     f"{100 * run['validation_before']:.1f}% -> {100 * run['validation_after']:.1f}% |")
    return "\n".join(lines) + "\n\n"


def _gap_beyond_spread(first: list[float], second: list[float]) -> bool:
    """Two seeds or more on each side, and the gap between the means larger than either side's std over seeds."""
    if min(len(first), len(second)) < 2:
        return False
    spread = max(statistics.stdev(first), statistics.stdev(second))
    return abs(statistics.mean(first) - statistics.mean(second)) > spread


def _separated(first: Arm, second: Arm) -> bool:
    """Whether two arms' means differ beyond both kinds of noise: each has two seeds or more, the gap exceeds
    both arms' seed spread, and the paired per-question difference pooled over the seeds both ran (the same
    held-out questions per seed) has a 95% interval that leaves out 0. Two seeds can agree by luck, so the
    spread alone would call a gap within one held-out set's sampling noise a ranking."""
    if not _gap_beyond_spread(first.accuracies, second.accuracies):
        return False
    theirs = {run.seed: run for run in second.runs}
    shared = [(run, theirs[run.seed]) for run in first.runs if run.seed in theirs]
    if not shared:
        return False
    _, low, high = paired_gain("".join(ours.heldout["correct"] for ours, _ in shared),
                               "".join(other.heldout["correct"] for _, other in shared))
    return low > 0 or high < 0


NOT_SEPARATED = ("not yet separated (one seed, a gap within the seed spread, or a paired difference whose 95% "
                 "interval holds 0) from")


def _ranking(found: list[Arm]) -> str:
    """Best arm first; 'ahead of' only when the two are separated (_separated)."""
    ordered = sorted(found, key=lambda item: -item.mean)
    best, second = ordered[0], ordered[1]
    relation = "ahead of" if _separated(best, second) else NOT_SEPARATED
    return f"{_named(best)}, {relation} {_named(second)}"


def _kl_separated(first: Arm, second: Arm) -> bool:
    """Whether two arms' KL to the start differ beyond seed noise: each has two seeds or more, the gap exceeds both
    arms' seed spread, and the paired per-seed difference over the seeds both ran has a 95% t interval without 0."""
    from scipy.stats import t as t_distribution

    first_kl, second_kl = ({run.seed: run.mean_kl for run in item.runs} for item in (first, second))
    shared = sorted(first_kl.keys() & second_kl.keys())
    if len(shared) < 2 or not _gap_beyond_spread(list(first_kl.values()), list(second_kl.values())):
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


def _default_probes(results: Path) -> list[dict]:
    """The memory probes of each method as a user runs it (the `default` variant)."""
    return [row for row in memory(results) if row["variant"] == "default"]


def _memory_sentence(results: Path) -> str:
    rows = _default_probes(results)
    if rows:
        least = min(rows, key=lambda row: row["peak_rss_mib"])
        most = max(rows, key=lambda row: row["peak_rss_mib"])
        return (f"{least['label']} ({least['peak_rss_mib']:,.0f} MiB peak RSS in the memory probe); most: "
                f"{most['label']} ({most['peak_rss_mib']:,.0f} MiB)")
    found = _finished("arithmetic", results)
    if not found:
        return "not measured yet"
    least = min(found, key=lambda item: item.peak_rss_mib)
    most = max(found, key=lambda item: item.peak_rss_mib)
    return (f"{least.label} ({least.peak_rss_mib:,.0f} MiB peak RSS of the timed runs; the memory probes have not run "
            f"yet); most: {most.label} ({most.peak_rss_mib:,.0f} MiB)")


def answer(results: Path = STUDY) -> str:
    """The answer, from the rows: which method learns most at equal CPU time, which keeps the base best, which needs
    least memory, and whether full ES or ES on a LoRA is the better ES on a CPU (a list, one line per question)."""
    lines = ["", ""]
    for task in TASKS:
        found = _finished(task, results)
        ranking = _ranking(found) if len(found) >= 2 else "fewer than two methods have finished runs yet"
        lines.append(f"- **Learns most, {TASK_NAMES[task]}**: {ranking}.")
    found = _finished("arithmetic", results)
    if len(found) >= 2:
        moved = max(found, key=lambda item: item.mean_kl)
        most = f"; moves it most: {moved.label} ({moved.mean_kl:.3f})" if len(found) > 2 else ""
        lines.append(f"- **Keeps the base best** (lowest KL to the start on other tasks' prompts, 2-digit addition): "
                     f"{_kept_best(found)}{most}.")
    lines.append(f"- **Least memory**: {_memory_sentence(results)}.")
    full, lora = arm(results, "arithmetic", "full_es"), arm(results, "arithmetic", "es_lora")
    if full.runs and lora.runs:
        lines.append(f"- **Full ES or ES on a LoRA, on a CPU** (2-digit addition): {_ranking([full, lora])}; KL to the "
                     f"start {full.mean_kl:.3f} (full ES) and {lora.mean_kl:.3f} (ES on a LoRA).")
    else:
        lines.append("- **Full ES or ES on a LoRA, on a CPU**: both need finished runs on 2-digit addition first.")
    return "\n".join(lines) + "\n\n"


def _verdict(ours: Arm, theirs: Arm) -> str:
    """held / did not hold / not separated (_separated), for 'ours beats theirs' by mean over seeds."""
    if not _separated(ours, theirs):
        return "not separated yet"
    return "held" if ours.mean > theirs.mean else "did not hold"


# "ES varies less from seed to seed" compares arms that move the same weights, chosen before any spread was seen:
# picking the steadiest of four ES arms against the steadiest of two GRPO arms would favour ES by the choice alone.
SPREAD_PAIRS = (("full_es", "grpo_full", "every weight"), ("es_lora", "grpo_lora", "the same adapter"))
SPREAD_LEVEL = 0.05


def spread_test(es: Arm, grpo: Arm) -> tuple[float, float, float]:
    """(variance ratio GRPO/ES, p of 'ES varies less', p of 'GRPO varies less'): one-sided F tests of the two
    variances over seeds. With 5 seeds each, one variance must be 6.4 times the other for p < 0.05: a std
    nearly twice the other's is a gap that two arms of one spread show often at 5 seeds."""
    from scipy.stats import f as f_distribution

    es_df, grpo_df = len(es.runs) - 1, len(grpo.runs) - 1
    es_var, grpo_var = es.std ** 2, grpo.std ** 2
    if es_var == grpo_var == 0:
        return 1.0, 1.0, 1.0
    if es_var == 0:  # no spread at all against some: no F value needed
        return float("inf"), 0.0, 1.0
    if grpo_var == 0:
        return 0.0, 1.0, 0.0
    ratio = grpo_var / es_var
    return ratio, float(f_distribution.sf(ratio, grpo_df, es_df)), float(f_distribution.sf(1 / ratio, es_df, grpo_df))


def _spread_row(task: str, es: Arm, grpo: Arm, moved: str) -> str:
    """One row of 'ES varies less from seed to seed': 'held' or 'did not hold' only once every planned seed is in
    and a one-sided F test rejects equal spreads at SPREAD_LEVEL; otherwise 'not separated'."""
    compared = "; ".join(f"{item.label} std {item.std:.1f}, {_seeds_text(item)}" if item.std is not None else
                         f"{item.label}, {_seeds_text(item)}" for item in (es, grpo))
    if any(len(item.runs) < item.planned for item in (es, grpo)):
        verdict = "not every seed in yet"
    else:
        ratio, p_less, p_more = spread_test(es, grpo)
        compared += f"; variance ratio {ratio:.2f}, F test p = {min(p_less, p_more):.2f}"
        verdict = "held" if p_less < SPREAD_LEVEL else "did not hold" if p_more < SPREAD_LEVEL else "not separated"
    return (f"| ES varies less from seed to seed (ES at Scale), {TASK_NAMES[task]}, {moved} | {compared} | "
            f"{verdict} |")


def papers_table(results: Path = STUDY) -> str:
    """'Where the papers' claims held', each row from the matrix's rows (best ES arm against best GRPO arm, and
    so on); a claim whose rows have not run says so."""
    lines = ["", "", "| claim (paper) | rows compared | here |", "|---|---|---|"]
    for task in TASKS:
        found = {item.method: item for item in _finished(task, results)}
        es = [found[m] for m in ES_METHODS if m in found]
        grpo = [found[m] for m in GRPO_METHODS if m in found]
        if es and grpo:
            best_es, best_grpo = max(es, key=lambda item: item.mean), max(grpo, key=lambda item: item.mean)
            lines.append(f"| ES beats GRPO at equal compute (ES at Scale), {TASK_NAMES[task]} | best ES "
                         f"{_named(best_es)}; best GRPO {_named(best_grpo)} | {_verdict(best_es, best_grpo)} |")
            for es_method, grpo_method, moved in SPREAD_PAIRS:
                if es_method in found and grpo_method in found:
                    lines.append(_spread_row(task, found[es_method], found[grpo_method], moved))
        if "essa" in found and "grpo_lora" in found:
            lines.append(f"| ESSA beats GRPO on a LoRA (ESSA), {TASK_NAMES[task]} | {_named(found['essa'])}; "
                         f"{_named(found['grpo_lora'])} | {_verdict(found['essa'], found['grpo_lora'])} |")
    found = {item.method: item for item in _finished("arithmetic", results)}
    if "lowrank" in found and "full_es" in found:
        rates = {m: found[m].mean_of("steps") * METHODS[m]["keys"]["population_size"] / TRAINING_SECONDS
                 for m in ("lowrank", "full_es")}
        held = "held" if rates["lowrank"] > rates["full_es"] else "did not hold"
        lines.append(f"| low-rank members are cheaper to evaluate (EGGROLL) | members evaluated per training second: "
                     f"low-rank ES {rates['lowrank']:.3f}, full ES {rates['full_es']:.3f} (2-digit addition) | "
                     f"{held} |")
    probes = {(row["method"], row["variant"]): row for row in memory(results)}
    if ("full_es", "default") in probes and ("grpo_full", "default") in probes:
        es, grpo = probes[("full_es", "default")], probes[("grpo_full", "default")]
        held = "held" if es["peak_rss_mib"] < grpo["peak_rss_mib"] else "did not hold"
        lines.append(f"| ES needs only inference memory (ES at Scale) | full ES {es['peak_rss_mib']:,.0f} MiB; "
                     f"GRPO full-parameter {grpo['peak_rss_mib']:,.0f} MiB (memory probes) | {held} |")
    if len(lines) == 3:
        lines.append("| every claim | not enough finished runs yet | |")
    return "\n".join(lines) + "\n\n"


def recommendations(results: Path = STUDY) -> str:
    """Which method to pick, each recommendation naming the rows it stands on; marked provisional until every arm
    has all its seeds."""
    found = _finished("arithmetic", results)
    if len(found) < 2:
        return "\n\n- not enough finished runs to recommend anything yet\n\n"
    lines = ["", ""]
    runs = sum(len(item.runs) for item in arms(results, "arithmetic"))
    planned = len(METHODS) * len(TASKS["arithmetic"]["seeds"])
    if runs < planned:
        lines.append(f"- *Provisional*: {runs} of the {planned} runs on 2-digit addition are in; each line below "
                     "follows the rows as they stand.")
    lines.append(f"- **Most accuracy for the CPU time**: {_ranking(found)} (2-digit addition rows).")
    lines.append(f"- **Keep the base model's behaviour elsewhere** (lowest KL to the start): {_kept_best(found)} "
                 "(2-digit addition rows).")
    # ESSA evolves an SFT adapter, and that SFT is a backward pass: it is named beside, not ranked, here
    free = [item for item in found if item.method in ES_METHODS and item.method != "essa"]
    essa = next((item for item in found if item.method == "essa"), None)
    beside = (f"; ESSA, which starts from an SFT adapter (a backward pass, or an adapter you already have), "
              f"reached {_mean_text(essa)}, {_seeds_text(essa)}" if essa else "")
    if len(free) >= 2:
        lines.append(f"- **No room for a backward pass (no gradients at all)**: {_ranking(free)}{beside} (2-digit "
                     "addition rows).")
    elif free:
        lines.append(f"- **No room for a backward pass (no gradients at all)**: {_named(free[0])}, the only such ES "
                     f"arm in so far{beside}.")
    rows = _default_probes(results)
    if rows:
        least = min(rows, key=lambda row: row["peak_rss_mib"])
        lines.append(f"- **Least memory**: {least['label']} ({least['peak_rss_mib']:,.0f} MiB peak RSS, memory "
                     "probe rows).")
    countdown = _finished("countdown", results)
    if len(countdown) >= 2:
        lines.append(f"- **A task that needs a warm start (Countdown)**: {_ranking(countdown)} (Countdown rows).")
    return "\n".join(lines) + "\n\n"


def setup(results: Path = STUDY) -> str:
    """What the runs ran on: CPU model, threads, dtype, torch, the commits, the training time."""
    seen = machine(results)
    return (f"{TRAINING_SECONDS / 60:.0f} minutes of training per run at {', '.join(map(str, seen['threads']))} CPU "
            f"thread, two runs at a time, float32, on {' / '.join(seen['cpu'])} (torch {', '.join(seen['torch'])}; "
            f"study commits {', '.join(seen['commits'])})")


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
    finished = _finished(task, results)
    parts = [f"{found.label} " + ", ".join(
        f"{100 * run.data['training']['validation_before']:.1f}% -> "
        f"{100 * run.data['training']['validation_after']:.1f}% (seed {run.seed})" for run in found.runs)
        for found in finished]
    counts = sorted({run.data["training"]["keys"]["num_eval"] for found in finished for run in found.runs})
    return ("; ".join(parts) + f" ({'/'.join(map(str, counts))} validation questions per run)") if parts \
        else "no run has finished yet"


def readme_table(results: Path = STUDY) -> str:
    """The README's compact table: every arm's mean held-out accuracy per task and its KL to the start."""
    lines = ["", "", "| method | " + " | ".join(TASK_NAMES[task].split(" (")[0] for task in TASKS)
             + " | KL to the start |", "|---|" + "---|" * (len(TASKS) + 1)]
    for method in METHODS:
        cells, kl = [], ""
        for task in TASKS:
            found = arm(results, task, method)
            cells.append(f"{_mean_text(found)}, {_seeds_text(found)}" if found.runs else "not run yet")
            if task == "arithmetic" and found.runs:
                kl = f"{found.mean_kl:.3f}"
        lines.append(f"| {METHODS[method]['label']} | " + " | ".join(cells) + f" | {kl} |")
    return "\n".join(lines) + "\n\n"


CLAIMS: dict[str, Callable[[], str]] = {
    "matrix-status": status, "matrix-setup": setup, "matrix-tuning-table": tuning_table,
    "matrix-arithmetic-table": partial(task_table, "arithmetic"),
    "matrix-countdown-table": partial(task_table, "countdown"),
    "matrix-budget-arithmetic": partial(budget_table, "arithmetic"),
    "matrix-budget-countdown": partial(budget_table, "countdown"), "matrix-memory-table": memory_table,
    "matrix-validation-countdown": partial(validation_text, "countdown"),
    "matrix-answer": answer, "matrix-papers-table": papers_table, "matrix-recommendations": recommendations,
    "matrix-readme-table": readme_table,
}

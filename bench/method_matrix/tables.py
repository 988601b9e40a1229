"""The method matrix's tables, rendered from bench/results/method_matrix/ alone: each task's arms (accuracy with
per-seed intervals, gains, steps, memory, KL, retention), accuracy at growing budgets, the memory probes, the tuning
and the README's compact table; and the row texts page.py's comparisons quote."""

from __future__ import annotations

import statistics
from pathlib import Path

from bench.method_matrix.arms import MEMORY_PROBES, METHODS, TASKS, TRANSFER_TASK, TUNING_SEED, TUNING_SETTINGS
from bench.method_matrix.measure import RETENTION_NUM_EVAL, SCORED_BUDGET
from bench.method_matrix.rows import (
    STEP_MATCHED_MARK,
    STUDY,
    Arm,
    Run,
    arm,
    arms,
    gain,
    load,
    machine,
    memory,
    sft_alone,
    sft_peak_on,
    start,
    wilson,
)
from bench.method_matrix.run import selection
from bench.method_matrix.transfer import matched_reruns, transfer_records

TASK_NAMES = {"arithmetic": "2-digit addition", "countdown": "Countdown (3 numbers, from the SFT warm start)"}
IFEVAL_STRICT = "retain/ifeval/prompt_strict"
ES_METHODS = ("full_es", "es_lora", "lowrank", "mezo", "essa")
ES_ALONE = ("full_es", "es_lora", "lowrank", "mezo")  # learn with ES alone; ESSA is SFT + ES
GRPO_METHODS = ("grpo_lora", "grpo_full")


def mean_text(found: Arm) -> str:
    return _accuracy_text(found.accuracies)


def _accuracy_text(accuracies: list[float]) -> str:
    """Mean accuracy over seeds, with its std once there are two."""
    spread = f" (std {statistics.stdev(accuracies):.1f})" if len(accuracies) > 1 else ""
    return f"{statistics.mean(accuracies):.1f}%{spread}"


def _per_seed_text(runs: list[Run]) -> str:
    return "; ".join(f"{run.seed}{STEP_MATCHED_MARK if run.step_matched else ''}: {run.accuracy:.1f}% "
                     f"[{run.interval[0]:.1f}, {run.interval[1]:.1f}]" for run in runs)


def step_matched_note(results: Path, found: list[Arm]) -> str:
    """What the mark on a step-matched seed means, with where it ran and the steps it matched; '' when none is."""
    matched = [(item.label, run) for item in found for run in item.runs if run.step_matched]
    if not matched:
        return ""
    study = " / ".join(machine(results)["cpu"])
    each = "; ".join(f"{label} seed {run.seed}: {run.step_matched['steps']} steps, the median of "
                     f"{', '.join(map(str, run.step_matched['median_of']))}" for label, run in matched)
    return (f"{STEP_MATCHED_MARK} step-matched on {' / '.join(sorted({run.cpu for _, run in matched}))}: the run took "
            f"the median steps of its arm's seeds on the study's {study} (equal work) instead of their equal time "
            f"({each}). Its accuracy at equal steps does not hang on the CPU; its seconds do, so none is quoted or "
            "compared.")


def seeds_text(found: Arm) -> str:
    return f"{len(found.runs)} of {found.planned} seeds"


def named(found: Arm) -> str:
    """An arm with its mean accuracy and seeds, and the flag of cut_text where the budget cut its answers."""
    return f"{found.label} {mean_text(found)}, {seeds_text(found)}{cut_text(found)}"


def finished_arms(task: str, results: Path = STUDY) -> list[Arm]:
    return [found for found in arms(results, task) if found.runs]


# Below this share of answers ended within the scored budget, an arm's accuracy is flagged: the budget cuts its
# answers, so its number says "no answer within the budget", not "a wrong answer".
ENDED_SHARE_FLAG = 0.9


def cut_text(found: Arm) -> str:
    """' (answers cut: ...)' when the scored budget ended fewer than ENDED_SHARE_FLAG of the arm's answers, with what
    the smaller budgets say of it (means over seeds): a score still rising at the scored budget is a floor; one that
    stopped rising at a smaller budget was not held down by the budget there, e.g. ' (answers cut: 56% ended within
    128 tokens; its score rose no further after 48 tokens: 5.5% there, 5.0% at 128)'."""
    runs = [run for run in found.runs if "ended_by_budget" in run.heldout]
    if not runs:
        return ""
    scored = str(runs[0].heldout["scored_budget"])
    ended = sum(run.heldout["ended_by_budget"][scored] for run in runs) / len(runs)
    if ended >= ENDED_SHARE_FLAG:
        return ""
    flag = f" (answers cut: {100 * ended:.0f}% ended within {scored} tokens"
    budgets = sorted((int(budget) for budget in runs[0].heldout["accuracy_by_budget"]
                      if int(budget) <= int(scored)), reverse=True)  # the scored budget first: (128, 96, 64, 48, 32)
    means = [sum(run.heldout["accuracy_by_budget"][str(budget)] for run in runs) / len(runs) for budget in budgets]
    if len(budgets) < 2:
        return flag + ", no smaller budget measured)"
    if means[0] > means[1]:
        return flag + f", and its score still rose from {budgets[1]} to {scored}: a floor)"
    if means[0] == max(means):  # the smallest budget from which every larger one scores what the scored one does
        settled = budgets[next((index for index, mean in enumerate(means) if mean != means[0]), len(means)) - 1]
        return flag + f"; scored the same from {settled} to {scored})"
    peak = min(budgets[index] for index, mean in enumerate(means) if mean == max(means))
    return (flag + f"; its score rose no further after {peak} tokens: {100 * max(means):.1f}% there, "
            f"{100 * means[0]:.1f}% at {scored})")


def ifeval_prompts() -> int:
    """How many IFEval prompts the retention measurement scored: RETENTION_NUM_EVAL, or fewer where the built-in set
    is smaller (it holds 24)."""
    from evotune.tasks import get_task

    return len(get_task("ifeval", seed=0, num_eval=RETENTION_NUM_EVAL).eval_rows)


def task_table(task: str, results: Path = STUDY) -> str:
    """One task's table: every arm's held-out accuracy (mean, std, per-seed 95% intervals), its gain over the
    start, the steps made in the equal training time, the training process's peak memory, and the KL to the start
    on other tasks' prompts."""
    lines = ["", "", "| method | seeds | held-out accuracy, mean (std) | per seed, 95% interval | gain over the start, "
             "per seed | steps in the time | peak RSS (ESSA: its SFT's if higher) | KL to the start (conciseness / "
             f"IFEval) | IFEval prompt-level strict (n = {ifeval_prompts()}) |", "|---" * 9 + "|"]
    lines += _start_rows(task, results) + _sft_alone_rows(task, results)
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
        accuracy = mean_text(found) + cut_text(found)
        lines.append(f"| {found.label} | {len(found.runs)} of {found.planned} | {accuracy} | "
                     f"{_per_seed_text(found.runs)} | "
                     f"{gain_text} | {found.mean_of('steps'):.0f} | {found.peak_rss_mib:,.0f} MiB | "
                     f"{kl} | {100 * ifeval:.1f}% |")
    note = step_matched_note(results, arms(results, task))
    return "\n".join(lines) + ("\n\n" + note if note else "") + "\n\n"


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


SFT_ALONE_LABEL = "SFT alone (ESSA's start)"


def _sft_alone_rows(task: str, results: Path) -> list[str]:
    """Where only ESSA starts from an SFT, that SFT measured alone as an arm is (what ESSA's evolution adds is its
    row minus this one); the SFTs were made again where they were measured, and the row says where."""
    if TASKS[task]["warm_start"] or "essa" not in METHODS:
        return []
    runs, seeds = sft_alone(results, task), len(TASKS[task]["seeds"])
    if not runs:
        return [f"| {SFT_ALONE_LABEL} | 0 of {seeds} | not run yet | | | | | | |"]
    gains = "; ".join(f"{run.seed}: {value[0]:+.1f} [{value[1]:+.1f}, {value[2]:+.1f}]" for run in runs
                      if (value := gain(results, run, task)) is not None)
    kl = " / ".join(f"{statistics.mean(run.kl(name) for run in runs):.3f}" for name in ("conciseness", "ifeval"))
    ifeval = statistics.mean(run.heldout["retention"][IFEVAL_STRICT] for run in runs)
    cpus = " / ".join(sorted({run.cpu for run in runs}))
    return [f"| {SFT_ALONE_LABEL}, made again and measured on {cpus} | {len(runs)} of {seeds} | "
            f"{_accuracy_text([run.accuracy for run in runs])} | {_per_seed_text(runs)} | {gains} | "
            f"{statistics.mean(run.data['training']['steps'] for run in runs):.0f} SFT steps | "
            f"{statistics.mean(run.data['training']['peak_rss_mib'] for run in runs):,.0f} MiB | {kl} | "
            f"{100 * ifeval:.1f}% |"]


def budget_table(task: str, results: Path = STUDY) -> str:
    """Accuracy of each arm (mean over its seeds) at the budgets measured, and the share of answers that had ended
    within the scored budget: whether the scored budget cuts answers."""
    found = [item for item in finished_arms(task, results) if "ended_by_budget" in item.runs[0].heldout]
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


# How each memory probe's variant (bench/method_matrix/arms.py's MEMORY_VARIANTS) reads in a table.
VARIANT_NAMES = {"default": "as a user runs it", "no_drift": "`log_drift: false`, as the timed runs",
                 "accumulation4": "`gradient_accumulation_steps: 4`"}


def memory_table(results: Path = STUDY) -> str:
    """The memory probes: each method's peak resident memory in the study's dtype, and the copies of the weights
    it holds besides activations; a probe that has not run yet keeps its row and says so."""
    found = {(row["method"], row["variant"]): row for row in memory(results)}
    if not found:
        return "\n\nthe memory probes have not run yet (they run after the main runs)\n\n"
    lines = ["", "", probes_machine_text(results), "", "| method | variant | peak RSS | copies of the weights held |",
             "|---|---|---|---|"]
    for method, variant in MEMORY_PROBES:
        row = found.get((method, variant))
        if row is None:
            lines.append(f"| {METHODS[method]['label']} | {VARIANT_NAMES[variant]} | not run yet | |")
            continue
        copies = ", ".join(f"{name.replace('_', ' ')} {size:,.0f} MiB" for name, size in row["weights"].items())
        if row["sft_peak_rss_mib"]:
            copies += (f" (its SFT first: {row['sft_peak_rss_mib']:,.0f} MiB peak RSS; the evolution alone, from an "
                       f"adapter you have: {row['probe_peak_rss_mib']:,.0f} MiB)")
        lines.append(f"| {row['label']} | {VARIANT_NAMES[variant]} | {row['peak_rss_mib']:,.0f} MiB | {copies} |")
    return "\n".join(lines) + "\n\n"


def probe_cpu_note(results: Path, probes: list[dict]) -> str:
    """' on <CPU>' where the memory probes (rows.memory's rows, each naming its CPU) ran on another machine type
    than the timed runs, else ''."""
    cpus = sorted({row["cpu"] for row in probes})
    return f" on {' / '.join(cpus)}" if cpus and cpus != machine(results)["cpu"] else ""


def probes_machine_text(results: Path = STUDY) -> str:
    """Where the memory probes ran, and, when that is not the timed runs' machine type, the peak RSS of the one job
    that ran on both (the SFT that ESSA's probe starts from, made again there by its restore)."""
    probes, study = machine(results, probes=True), machine(results)
    text = (f"The probes ran on {' / '.join(probes['cpu'])} at {', '.join(map(str, probes['threads']))} thread "
            f"(torch {', '.join(probes['torch'])})")
    if probes["cpu"] == study["cpu"]:
        return text + ", the timed runs' machine type."
    text += (f", not the timed runs' {' / '.join(study['cpu'])}: peak memory in one dtype at one thread does not hang "
             "on the CPU's speed (a probe runs two steps, however long they take). ")
    peaks = [(cpu, sft_peak_on(results, cpu)) for cpu in study["cpu"] + probes["cpu"]]
    if any(peak is None for _, peak in peaks):
        return text + "The job that checks this on both machines (the SFT that ESSA's probe starts from) has not run " \
                      "on both yet."
    return text + ("The one job run on both, the arithmetic SFT that ESSA's probe starts from, peaked at "
                   + " and ".join(f"{peak:,.0f} MiB on {cpu}" for cpu, peak in peaks) + ".")


def setting_text(method: str, setting: int) -> str:
    """A tuning setting as text, every key its grid varies over (a key the setting leaves out at the method's fixed
    value), e.g. `sigma 0.002, learning_rate 0.008, batch_size 16`: two settings' texts show the key they differ in."""
    spec = METHODS[method]
    keys = list(dict.fromkeys(key for grid_setting in spec["grid"] for key in grid_setting))
    values = {key: spec["grid"][setting].get(key, spec["keys"].get(key)) for key in keys}
    return ", ".join(f"{key} {value:g}" if isinstance(value, float) else f"{key} {value}"
                     for key, value in values.items())


def _grid_edges(spec: dict, chosen: int) -> str:
    """Every grid key (the method's fixed value where a setting leaves it out) whose chosen value is the grid's
    smallest or largest: a better setting may lie beyond it. Keys whose values have no order (words) are left out."""
    grid = [{**spec["keys"], **setting} for setting in spec["grid"]]
    edges = []
    for key in sorted({key for setting in spec["grid"] for key in setting}):
        values = sorted({setting.get(key) for setting in grid if isinstance(setting.get(key), int | float)})
        if len(values) < 2 or not isinstance(grid[chosen].get(key), int | float):
            continue
        if grid[chosen][key] in (values[0], values[-1]):
            edges.append(f"{'largest' if grid[chosen][key] == values[-1] else 'smallest'} {key} "
                         f"(of {len(values)})")
    return ", ".join(edges) or "none"


def tuning_table(results: Path = STUDY) -> str:
    """Each method's tuning: the settings tried (the same budget for every method), the one chosen on the validation
    split with its validation accuracy before and after and that score's 95% interval, the next best setting's score
    (how far apart the noise leaves them), the seconds per step over the settings, and every grid key whose chosen
    value is the grid's edge (a better setting may lie beyond it)."""
    lines = ["", "", "| method | settings tried | chosen | its validation accuracy, before -> after [95% interval] | "
             "the next best setting's | seconds per step over the settings | chosen at the grid's edge |",
             "|---|---|---|---|---|---|---|"]
    for method, spec in METHODS.items():
        chosen = selection(results, method)
        if chosen is None:
            lines.append(f"| {spec['label']} | {len(spec['grid'])} | tuning not finished | | | | |")
            continue
        runs = [load(results, f"tune/arithmetic/{method}/s{index}_seed{TUNING_SEED}.json")["training"]
                for index in range(TUNING_SETTINGS)]
        run, n = runs[chosen], runs[chosen]["keys"]["num_eval"]
        low, high = wilson(round(run["validation_after"] * n), n)
        runner_up = max((index for index in range(TUNING_SETTINGS) if index != chosen),
                        key=lambda index: runs[index]["validation_after"])
        # a run budgeted in CPU seconds (run.py --training-clock cpu) counts its steps' CPU seconds: its budget over its
        # steps (it stops at the first step past the budget); its wall seconds also hold the time others took the CPU
        cpu_clock = runs[chosen]["keys"].get("training_clock") == "cpu"
        per_step = [(item["keys"]["max_training_seconds"] if cpu_clock else
                     item["training_seconds"] - item["sft_seconds_charged"]) / item["steps"] for item in runs]
        lines.append(f"| {spec['label']} | {TUNING_SETTINGS} | {setting_text(method, chosen)} | "
                     f"{100 * run['validation_before']:.1f}% -> {100 * run['validation_after']:.1f}% "
                     f"[{low:.1f}, {high:.1f}], n = {n} | {100 * runs[runner_up]['validation_after']:.1f}% "
                     f"({setting_text(method, runner_up)}) | {min(per_step):.0f}-{max(per_step):.0f} "
                     f"{'CPU s' if cpu_clock else 's'} | "
                     f"{_grid_edges(spec, chosen)} |")
    return "\n".join(lines) + "\n\n"


def _transfer_mean(results: Path, found: Arm) -> str:
    """The README's transfer cell: the mean over an arm's runs that scored the transfer split, else over its runs
    trained again for it (run.py's reruns), else why there is none."""
    records, again = transfer_records(results, found)
    if not records:
        return "not measured" if found.runs else "not run yet"
    mean = f"{100 * statistics.mean(record['accuracy'] for record in records):.1f}%"
    if not again:
        return f"{mean}, {len(records)} seeds"
    matched = matched_reruns(results, found)
    cpus = " / ".join(sorted({record["machine"]["cpu"] for record in matched}))
    # no footnote: the README stays short; "equal steps" against the study's equal time says what differs
    marked = f" ({len(matched)} at equal steps on {cpus}{STEP_MATCHED_MARK})" if matched else ""
    return f"{mean}, {len(again)} seed{'s' if len(again) > 1 else ''} trained again{marked}"


def readme_table(results: Path = STUDY) -> str:
    """The README's compact table: every arm's mean held-out accuracy per task (2-digit addition in the training
    template and past it, on the transfer split) and its KL to the start."""
    names = [TASK_NAMES[task].split(" (")[0] for task in TASKS]
    names.insert(list(TASKS).index(TRANSFER_TASK) + 1, "past the template (transfer split)")
    lines = ["", "", "| method | " + " | ".join(names) + " | KL to the start |", "|---|" + "---|" * (len(names) + 1)]
    for method in METHODS:
        cells, kl = [], ""
        for task in TASKS:
            found = arm(results, task, method)
            cells.append(f"{mean_text(found)}, {seeds_text(found)}{cut_text(found)}" if found.runs else "not run yet")
            if task == TRANSFER_TASK:
                cells.append(_transfer_mean(results, found))
            if task == "arithmetic" and found.runs:
                kl = f"{found.mean_kl:.3f}"
        lines.append(f"| {METHODS[method]['label']} | " + " | ".join(cells) + f" | {kl} |")
    return "\n".join(lines) + "\n\n"

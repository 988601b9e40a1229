"""The method matrix's report: every result file under bench/results/method_matrix/ as tables, with what is still
to run, into REPORT.md beside them (and a plot of the tuning runs' reward against training time).

    python -m bench.method_matrix.report                 # bench/results/method_matrix/REPORT.md and its plots
    python -m bench.method_matrix.report --results DIR   # another results folder (a dry run's)

Numbers come from the files only; a job without its file is listed as not run, never estimated. Validation
accuracy (tuning) is on each run's own validation split; held-out accuracy (main runs) on measure.py's fresh
questions, disjoint from training and validation.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.method_matrix.arms import METHODS, TASKS, TUNING_SEED, TUNING_SETTINGS, main_path
from bench.method_matrix.measure import SCORED_BUDGET
from bench.method_matrix.plots import write_plots
from bench.method_matrix.rows import STUDY, heldout, load
from bench.method_matrix.run import plan, selection
from bench.method_matrix.tables import budget_table, setting_text, task_table


def tuning_table(results: Path) -> list[str]:
    lines = ["| method | setting | steps | training s | s per step | validation before -> after | chosen | ran |",
             "|---|---|---|---|---|---|---|---|"]
    for method, spec in METHODS.items():
        chosen = selection(results, method)
        for setting in range(TUNING_SETTINGS):
            data = load(results, f"tune/arithmetic/{method}/s{setting}_seed{TUNING_SEED}.json")
            if data is None:
                lines.append(f"| {spec['label']} | {setting_text(method, setting)} | not run | | | | | |")
                continue
            run = data["training"]
            lines.append(f"| {spec['label']} | {setting_text(method, setting)} | {run['steps']} | "
                         f"{run['training_seconds']:.0f} | {run['training_seconds'] / run['steps']:.1f} | "
                         f"{100 * run['validation_before']:.1f}% -> {100 * run['validation_after']:.1f}% | "
                         f"{'yes' if chosen == setting else ''} | {data['machine']['date']} |")
    return lines


# Keys that leave a step's shapes alone (population, prompts, tokens); settings equal in all others have the same.
STEP_RATE_FREE_KEYS = ("learning_rate", "sigma")


def speed_drift(results: Path) -> str | None:
    """The largest spread of seconds per step between tuning runs with the same shapes per step (settings that differ
    only in learning rate or sigma): the shared machine's speed moving between jobs, or completions of other lengths,
    either of which changes how many steps a run makes in its fixed time."""
    spreads = []
    for method in METHODS:
        groups: dict[str, list[tuple[float, str]]] = {}
        for setting, values in enumerate(METHODS[method]["grid"]):
            data = load(results, f"tune/arithmetic/{method}/s{setting}_seed{TUNING_SEED}.json")
            if data is None:
                continue
            work = json.dumps({key: value for key, value in values.items() if key not in STEP_RATE_FREE_KEYS},
                              sort_keys=True)
            run = data["training"]
            groups.setdefault(work, []).append((run["training_seconds"] / run["steps"], data["machine"]["date"]))
        for runs in groups.values():
            if len(runs) > 1:
                slow, fast = max(runs), min(runs)
                spreads.append((slow[0] / fast[0] - 1, METHODS[method]["label"], fast, slow))
    if not spreads:
        return None
    spread, label, fast, slow = max(spreads)
    return (f"Runs with the same shapes per step (settings that differ only in learning rate or sigma) took up to "
            f"{100 * spread:.0f}% longer per step in one job than in another ({label}: {fast[0]:.1f} s at "
            f"{fast[1]}, {slow[0]:.1f} s at {slow[1]}). Two causes are possible and these files do not tell them "
            f"apart: the shared machine's speed moves between jobs, and a model that writes longer completions "
            f"generates longer (generation stops when every answer has ended). Either way, the steps a run makes "
            f"in its fixed time carry that much noise.")


def budget_check(results: Path, task: str) -> list[str]:
    """Each finished run's held-out accuracy at every budget measured, the share of its answers ended within the
    largest, the base model's, and on a warm-start task each seed's SFT start's. A run read at an older, smaller
    scored budget is marked until it is measured again (rescore/). A score above the scored one at a smaller budget
    means text written after an answer changed what the scorer read (arithmetic reads the last number)."""
    rows = [("base model", heldout(results, f"base/{task}.json"))]
    if TASKS[task]["warm_start"]:  # each seed's start
        rows += [(f"SFT warm start, seed {seed}", heldout(results, f"warm_start/{task}/sft_seed{seed}.json"))
                 for seed in TASKS[task]["seeds"]]
    rows += [(f"{spec['label']}, seed {seed}", heldout(results, main_path(task, method, seed)))
             for method, spec in METHODS.items() for seed in TASKS[task]["seeds"]]
    rows = [(name, record) for name, record in rows if record is not None]
    if not rows:
        return []
    budgets = sorted({budget for _, record in rows for budget in record["accuracy_by_budget"]}, key=int)
    lines = ["| run | " + " | ".join(f"{budget} tokens" for budget in budgets) + " | ended within the largest |",
             "|---|" + "---|" * (len(budgets) + 1)]
    stale, shorter, cut = [], [], []
    for name, record in rows:
        accuracy, ended = record["accuracy_by_budget"], record.get("ended_by_budget", {})
        largest = max(accuracy, key=int)
        share = f"{100 * ended[largest]:.1f}%" if largest in ended else "not measured"
        lines.append(f"| {name} | " + " | ".join(f"{100 * accuracy[b]:.1f}%" if b in accuracy else "" for b in budgets)
                     + f" | {share} |")
        scored = str(record["scored_budget"])
        if int(scored) != SCORED_BUDGET:
            stale.append(name)
        elif any(accuracy[b] > accuracy[scored] for b in accuracy if int(b) < int(scored)):
            shorter.append(name)
        if largest in ended and ended[largest] < 0.99:
            cut.append(f"{name} ({100 * ended[largest]:.1f}%)")
    notes = []
    if stale:
        notes.append(f"Read at a smaller budget than {SCORED_BUDGET} and not yet measured again (left out of the "
                     f"tables above): {'; '.join(stale)}.")
    if cut:
        notes.append(f"Under 99% of the answers ended within {SCORED_BUDGET} tokens: {'; '.join(cut)}.")
    if shorter:
        notes.append(f"Higher at a smaller budget than at the scored one: {'; '.join(shorter)} (text written after "
                     "an answer changed what the scorer read).")
    return lines + ["", " ".join(notes) or f"Every run's answers ended within {SCORED_BUDGET} tokens (99% or more) "
                    "and no run scores higher at a smaller budget."]


def status(results: Path) -> tuple[int, int, list[str]]:
    jobs = plan(results)
    done = [job["path"] for job in jobs if (results / job["path"]).is_file()]
    return len(done), len(jobs), [job["path"] for job in jobs if job["path"] not in done]


def plot_tuning(results: Path, output: Path) -> Path | None:
    """Each tuning run's mean training reward against training seconds, one panel per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = {method: [(setting, data["training"]["reward_curve"]) for setting in range(TUNING_SETTINGS)
                       if (data := load(results, f"tune/arithmetic/{method}/s{setting}_seed{TUNING_SEED}.json"))]
              for method in METHODS}
    if not any(curves.values()):
        return None
    figure, axes = plt.subplots(2, 3, figsize=(12, 6), sharex=True)
    for axis, (method, runs) in zip(axes.flat, curves.items(), strict=False):
        for setting, curve in runs:
            axis.plot([point[0] for point in curve], [point[1] for point in curve], marker=".", label=f"s{setting}")
        axis.set_title(METHODS[method]["label"] + ("" if runs else " (not run)"))
        axis.set_xlabel("training seconds")
        axis.set_ylabel("mean training reward")
        if runs:
            axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(output, dpi=100)
    plt.close(figure)
    return output


def report(results: Path) -> str:
    done, total, missing = status(results)
    lines = ["# Method matrix: results so far", "",
             f"{done} of {total} jobs have a result file (generated by `python -m bench.method_matrix.report` from "
             "the files in this folder; a job without its file is listed as not run).", "",
             f"## Tuning (2-digit addition, seed {TUNING_SEED}, validation split of each run)", "",
             *tuning_table(results), ""]
    drift = speed_drift(results)
    if drift:
        lines += [drift, ""]
    for task in TASKS:
        lines += [f"## Main runs: {task} (held-out accuracy at {SCORED_BUDGET} new tokens)", "",
                  *task_table(task, results).strip("\n").splitlines(), "", "Accuracy by budget, mean over seeds:",
                  "", *budget_table(task, results).strip("\n").splitlines(), ""]
        check = budget_check(results, task)
        if check:
            lines += [f"### Does the token budget cut answers? ({task}, held-out accuracy by budget)", "", *check, ""]
    if missing:
        lines += ["## Not run yet", "", *(f"- `{path}`" for path in missing[:40])]
        if len(missing) > 40:
            lines.append(f"- ... and {len(missing) - 40} more")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=STUDY)
    args = parser.parse_args()
    text = report(args.results)
    (args.results / "REPORT.md").write_text(text)
    plotted = [plot_tuning(args.results, args.results / "tuning.png"), *write_plots(args.results)]
    print(text)
    print(f"wrote {args.results / 'REPORT.md'}, " + ", ".join(str(path) for path in plotted if path))


if __name__ == "__main__":
    main()

"""The method matrix's report: every result file under bench/results/method_matrix/ as tables, with what is still
to run, into REPORT.md beside them (and a plot of the tuning runs' reward against training time).

    python -m bench.method_matrix.report                 # bench/results/method_matrix/REPORT.md, tuning.png
    python -m bench.method_matrix.report --results DIR   # another results folder (a dry run's)

Numbers come from the files only; a job without its file is listed as not run, never estimated. Validation
accuracy (tuning) is on each run's own validation split; held-out accuracy (main runs) on measure.py's fresh
questions, disjoint from training and validation.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from bench.common import RESULTS
from bench.method_matrix.arms import METHODS, TASKS, TUNING_SEED, TUNING_SETTINGS
from bench.method_matrix.run import plan, selection

STUDY = RESULTS / "method_matrix"


def load(results: Path, path: str) -> dict[str, Any] | None:
    file = results / path
    return json.loads(file.read_text()) if file.is_file() else None


def setting_text(method: str, setting: int) -> str:
    return ", ".join(f"{key} {value:g}" if isinstance(value, float) else f"{key} {value}"
                     for key, value in METHODS[method]["grid"][setting].items())


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


def heldout_accuracy(data: dict[str, Any], budget: str) -> float | None:
    """A main run's held-out accuracy at `budget` new tokens, from measure.py's record."""
    value = data.get("heldout", {}).get("accuracy_by_budget", {}).get(budget)
    return None if value is None else float(value)


def main_table(results: Path, task: str, budget: str) -> list[str]:
    seeds = TASKS[task]["seeds"]
    lines = [f"| method | runs | held-out accuracy at {budget} tokens, mean (std) | per seed |", "|---|---|---|---|"]
    for method, spec in METHODS.items():
        values = {}
        for seed in seeds:
            data = load(results, f"main/{task}/{method}/seed{seed}.json")
            if data is not None and (value := heldout_accuracy(data, budget)) is not None:
                values[seed] = 100 * value
        if not values:
            lines.append(f"| {spec['label']} | 0 of {len(seeds)} | not run | |")
            continue
        spread = f" ({statistics.stdev(values.values()):.1f})" if len(values) > 1 else ""
        per_seed = ", ".join(f"{seed}: {value:.1f}%" for seed, value in values.items())
        lines.append(f"| {spec['label']} | {len(values)} of {len(seeds)} | "
                     f"{statistics.mean(values.values()):.1f}%{spread} | {per_seed} |")
    return lines


def budget_check(results: Path, task: str) -> list[str]:
    """Each finished main run's held-out accuracy at every budget measure.py scored, and the base model's. A score
    above the scored budget's at the largest budget may mean the scored budget cut answers; one above it at a smaller
    budget means text written after an answer changed what the scorer read. Either way the scored number moves."""
    rows = [("base model", load(results, f"base/{task}.json"))]
    rows += [(f"{spec['label']}, seed {seed}", load(results, f"main/{task}/{method}/seed{seed}.json"))
             for method, spec in METHODS.items() for seed in TASKS[task]["seeds"]]
    rows = [(name, data["heldout"]) for name, data in rows if data is not None and "heldout" in data]
    if len(rows) < 2:
        return []
    budgets = sorted({budget for _, heldout in rows for budget in heldout["accuracy_by_budget"]}, key=int)
    lines = ["| run | " + " | ".join(f"{budget} tokens" for budget in budgets) + " |",
             "|---|" + "---|" * len(budgets)]
    longer, shorter = [], []
    for name, heldout in rows:
        accuracy = heldout["accuracy_by_budget"]
        lines.append(f"| {name} | " + " | ".join(f"{100 * accuracy[b]:.1f}%" if b in accuracy else "" for b in budgets)
                     + " |")
        scored = str(heldout["scored_budget"])
        if scored not in accuracy:
            continue
        if accuracy.get(budgets[-1], 0) > accuracy[scored]:
            longer.append(f"{name} ({100 * accuracy[scored]:.1f}% -> {100 * accuracy[budgets[-1]]:.1f}%)")
        if any(int(b) < int(scored) and accuracy[b] > accuracy[scored] for b in accuracy):
            shorter.append(name)
    if not longer and not shorter:
        return lines + ["", f"No run scores higher at another budget than at the scored {scored} tokens."]
    summary = [f"Accuracy moves with the budget. At {budgets[-1]} tokens {len(longer)} of {len(rows)} runs score "
               f"higher than at the scored {scored}" + (f": {'; '.join(longer)}" if longer else "") + "; there the "
               "scored budget may cut answers."]
    if shorter:
        summary.append(f"{len(shorter)} score higher at a smaller budget than at the scored one "
                       f"({'; '.join(shorter)}): text written after an answer changed what the scorer read, so a "
                       "longer budget does not only complete answers.")
    return lines + ["", " ".join(summary) + " Until the final models are scored at larger budgets, the scored "
                    "numbers carry this much uncertainty."]


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
        lines += [f"## Main runs: {task}", "", *main_table(results, task, "48"), ""]
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
    plotted = plot_tuning(args.results, args.results / "tuning.png")
    print(text)
    print(f"wrote {args.results / 'REPORT.md'}" + (f", {plotted}" if plotted else ""))


if __name__ == "__main__":
    main()

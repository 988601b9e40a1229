"""Tables and plots of bench/drift/drift_study.sh: per method, target accuracy (untruncated and at training's token
budget), retention on the other tasks, KL to the base on their prompts, and the distance of the final weights from
the base, with 95% intervals; curves over training time and retention against target accuracy.

    python -m bench.drift.drift_table runs/drift --budget 1800 --name drift_arithmetic

Proportions get a Wilson interval pooled over the method's seeds (each seed scores its own held-out questions);
KL and distance, which have no per-question record here, get the seeds' range. The update distance of the final
weights is computed the same way for every method (LoRA adapters merged into the base first):
||theta - theta_base|| / ||theta_base|| over every parameter, and the share of weights that differ at all.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from bench.common import study_results, write_result
from evotune.evaluation.statistics import wilson_interval
from evotune.runs.compare import evaluations
from evotune.tracking.tracker import read_metrics

TARGET = "eval/accuracy"


def run_curve(directory: Path) -> list[dict]:
    """Every evaluation record, `time_s` the cumulative training time before it (evaluation excluded)."""
    return evaluations(read_metrics(directory / "metrics.jsonl"), TARGET)


def retention_keys(curve: list[dict]) -> list[str]:
    """retain/<task>/<metric> keys, correctness and KL first (reward-like keys of conciseness are lengths)."""
    keys = sorted({key for point in curve for key in point if key.startswith("retain/")})
    preferred = [key for key in keys if key.endswith(("/contains_solution", "/prompt_strict", "/accuracy", "/kl"))]
    return preferred or keys


def update_distance(directory: Path) -> dict[str, float]:
    """||final - base|| / ||base|| over all parameters, and the share of weights that changed, from final/
    (an adapter's final/ loads on its base through the same loader, then merges)."""
    from evotune.runs.groups import read_config_file

    base = _load(read_config_file(directory / "config.yaml")["model"])
    tuned = _load(str(directory / "final"))
    if hasattr(tuned, "merge_and_unload"):  # a PeftModel
        tuned = tuned.merge_and_unload()
    difference, norm, changed, total = 0.0, 0.0, 0, 0
    tuned_state = tuned.state_dict()
    for name, weight in base.state_dict().items():
        delta = tuned_state[name].float() - weight.float()
        difference += float(delta.pow(2).sum())
        norm += float(weight.float().pow(2).sum())
        changed += int((delta != 0).sum())
        total += delta.numel()
    return {"relative_l2": (difference / norm) ** 0.5, "l2": difference ** 0.5, "changed_fraction": changed / total}


def _load(model: str):
    from evotune.backends.models import load_model

    return load_model(model, dtype="float32", device="cpu")[0]


def load_runs(root: Path, seeds: list[int], unfinished: list[str] | None = None) -> dict[str, list[dict]]:
    """Per method, its finished runs of `seeds`; a run still training is left out (a final value it has not
    reached would be averaged in) and named in `unfinished`."""
    methods: dict[str, list[dict]] = defaultdict(list)
    for directory in sorted(root.glob("*-seed*")):
        match = re.fullmatch(r"(.+)-seed(\d+)", directory.name)
        if not match or int(match.group(2)) not in seeds or not (directory / "metrics.jsonl").exists():
            continue
        curve = run_curve(directory)
        if not curve:
            continue
        run = {"run": str(directory), "seed": int(match.group(2)), "curve": curve, "final": curve[-1],
               "finished": (directory / "final").is_dir()}
        truncated = sorted(directory.glob("eval-tokens*.json"))
        if truncated:
            run["truncated"] = json.loads(truncated[0].read_text())[0]
        if not run["finished"]:
            if unfinished is not None:
                unfinished.append(f"{directory.name} (at {curve[-1]['time_s']:.0f} s of training)")
            continue
        run["distance"] = update_distance(directory)
        methods[match.group(1)].append(run)
    return dict(methods)


def retention_counts(config: dict) -> dict[str, int]:
    """Prompts each retention task evaluates: its held-out split at retention_num_eval (a task may hold fewer)."""
    from evotune.tasks import get_task

    return {task: len(get_task(task, seed=config["seed"], num_eval=config["retention_num_eval"]).eval_rows)
            for task in config.get("retention_tasks", [])}


def proportion(values: list[float], counts: list[int]) -> dict:
    successes = sum(value * count for value, count in zip(values, counts))
    return {"mean": float(np.mean(values)), "per_seed": values,
            "ci95": list(wilson_interval(successes, sum(counts)))}


def spread(values: list[float]) -> dict:
    return {"mean": float(np.mean(values)), "per_seed": values, "range": [min(values), max(values)]}


def summarize(runs: list[dict], num_eval: int, retention_num_eval: dict[str, int]) -> dict:
    finals = [run["final"] for run in runs]
    row = {"seeds": [run["seed"] for run in runs], "finished": all(run["finished"] for run in runs),
           **evaluation_summary(finals, num_eval, retention_num_eval)}
    if all("truncated" in run for run in runs):
        row["target_accuracy_truncated"] = proportion([run["truncated"]["accuracy"] for run in runs],
                                                      [run["truncated"]["num_eval"] for run in runs])
    drift = [point.get("drift/relative_l2") for point in finals]  # in the run, from the fp32 mean (ES spaces)
    if all(isinstance(value, (int, float)) for value in drift):
        row["drift/relative_l2"] = spread(drift)
    if all("distance" in run for run in runs):
        for key in ("relative_l2", "changed_fraction"):
            row[f"distance/{key}"] = spread([run["distance"][key] for run in runs])
    return row


def evaluation_summary(points: list[dict], num_eval: int, retention_num_eval: dict[str, int]) -> dict:
    """Training time, target accuracy and retention over evaluation records (one per run)."""
    row = {"training_s": spread([point["time_s"] for point in points]),
           "target_accuracy": proportion([point[TARGET] for point in points], [num_eval] * len(points))}
    for key in retention_keys(points):
        values = [point.get(key) for point in points]
        if any(value is None for value in values):
            continue
        task = key.split("/")[1]
        # samples a metric could not score (e.g. an IFEval prompt needing data an offline machine lacks) are
        # left out of its mean, so they are left out of its count too
        counts = [retention_num_eval[task] - int(point.get(f"retain/{task}/skipped") or 0) for point in points]
        row[key] = spread(values) if key.endswith("/kl") else proportion(values, counts)
    return row


def at_equal_target(methods: dict[str, list[dict]], num_eval: int, retention_num_eval: dict[str, int]) -> dict:
    """The study's question, at equal target accuracy: retention at each run's first evaluation that reached
    the lowest of the methods' mean final accuracies (a level every method reaches on average). Evaluations
    are some minutes apart, so a run may pass the level by a margin: its accuracy there is in the row."""
    level = float(min(np.mean([run["final"][TARGET] for run in runs]) for runs in methods.values()))
    rows = {}
    for method, runs in methods.items():
        points = [point for run in runs if (point := next((p for p in run["curve"] if p[TARGET] >= level), None))]
        rows[method] = {"runs_reaching": f"{len(points)} of {len(runs)}",
                        **(evaluation_summary(points, num_eval, retention_num_eval) if points else {})}
    return {"level": level, "methods": rows}


def markdown(table: dict[str, dict], command: str) -> str:
    columns = sorted({key for row in table.values() for key in row if isinstance(row[key], dict)},
                     key=lambda key: (not key.startswith("target"), key))
    lines = [f"Command: `{command}`", "", "| method | seeds | " + " | ".join(columns) + " |",
             "|---" * (len(columns) + 2) + "|"]
    for method, row in table.items():
        cells = []
        for key in columns:
            cell = row.get(key)
            if cell is None:
                cells.append("-")
            elif "ci95" in cell:
                low, high = cell["ci95"]
                cells.append(f"{cell['mean']:.3f} [{low:.3f}, {high:.3f}]")
            else:
                low, high = cell["range"]
                cells.append(f"{cell['mean']:.3g} ({low:.3g}-{high:.3g})")
        seeds = (",".join(map(str, row["seeds"])) + ("" if row["finished"] else " (unfinished)") if "seeds" in row
                 else f"{row['runs_reaching']} reached it")
        lines.append(f"| {method} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(methods: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    all_runs = [run for runs in methods.values() for run in runs]
    points = [point for run in all_runs for point in run["curve"]]
    # the distance from the base over time, where runs log it (evotune train; TRL's GRPO runs have only the
    # final distance, in the table)
    keys = [TARGET, *retention_keys(points), *(["drift/relative_l2"] if any("drift/relative_l2" in p for p in points)
                                               else [])]
    panels = len(keys) + 1
    figure, axes = plt.subplots(1, panels, figsize=(4 * panels, 3.6))
    for index, (method, runs) in enumerate(methods.items()):
        for run in runs:
            times = [point["time_s"] for point in run["curve"]]
            label = method if run is runs[0] else None
            for axis, key in zip(axes, keys):
                axis.plot(times, [point.get(key) for point in run["curve"]], marker="o", ms=3, color=f"C{index}",
                          alpha=0.8, label=label)
            # the question of the study: at equal target accuracy, which keeps more?
            retained = next((key for key in keys[1:] if not key.endswith("/kl")), None)
            if retained:
                axes[-1].plot([point[TARGET] for point in run["curve"]],
                              [point.get(retained) for point in run["curve"]],
                              marker="o", ms=3, color=f"C{index}", alpha=0.8, label=label)
    for axis, key in zip(axes, keys):
        axis.set(xlabel="training time (s)", title=key)
        axis.grid(alpha=0.3)
    axes[-1].set(xlabel=TARGET, title=f"{keys[1] if len(keys) > 1 else ''} vs target")
    axes[-1].grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--budget", type=float, required=True, help="max_training_seconds of the runs")
    parser.add_argument("--truncated-tokens", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="the runs with retention records")
    parser.add_argument("--name", default="drift_arithmetic")
    args = parser.parse_args()
    unfinished: list[str] = []
    methods = load_runs(args.runs, args.seeds, unfinished)
    if not methods:
        raise SystemExit(f"no evaluated runs (<method>-seed<N>/metrics.jsonl) under {args.runs}")
    from evotune.runs.groups import read_config_file

    config = read_config_file(Path(methods[next(iter(methods))][0]["run"]) / "config.yaml")
    counts = retention_counts(config)
    table = {method: summarize(runs, config["num_eval"], counts) for method, runs in methods.items()}
    matched = at_equal_target(methods, config["num_eval"], counts)
    command = (f"bash bench/drift/drift_study.sh  (tables: python -m bench.drift.drift_table {args.runs} "
               f"--budget {args.budget:g})")
    write_result(args.name, {"command": command, "budget_s": args.budget, "methods": table,
                             "at_equal_target": matched, "unfinished_left_out": unfinished}, study="drift")
    text = markdown(table, command) + (f"\nAt equal target accuracy: each run's first evaluation at or above "
                                       f"{matched['level']:.3f} (the lowest method's mean final accuracy)\n\n"
                                       + markdown(matched["methods"], command).split("\n", 2)[2])
    if unfinished:
        text += "\nLeft out, still training: " + ", ".join(unfinished) + "\n"
    (study_results("drift") / f"{args.name}.md").write_text(text)
    plot(methods, study_results("drift") / f"{args.name}.png")


if __name__ == "__main__":
    main()

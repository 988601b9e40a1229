"""`evotune compare RUN_DIR... --output DIR`: several runs side by side, on the budgets that matter.

Both founding papers judge ES against GRPO by held-out accuracy per sampled completion and per
wall-clock minute. Any run directory that follows the run-directory contract (config.yaml +
metrics.jsonl with `samples_seen`, `time_s` and `eval/<metric>`) can be compared, whatever
method wrote it. Runs are grouped into methods by their config (or its `method` key), so
several seeds of one method give a mean and a spread.

Writes DIR/compare.json, DIR/compare.md (one table) and DIR/<metric>_vs_samples.png,
DIR/<metric>_vs_time.png. Time is the cumulative training time (`time_s`), evaluation excluded.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from .errors import ConfigError
from .evaluation import wilson_interval
from .tracking import dumps_strict, read_metrics


def method_label(config: dict) -> str:
    """A run's method: its `method` key (e.g. grpo) or ES's space/strategy."""
    if config.get("method"):
        return str(config["method"])
    return f"es {config.get('space', 'full')}/{config.get('strategy', 'openes')}"


def load_run(directory: str | Path, metric: str | None) -> dict[str, Any]:
    directory = Path(directory)
    config_path, metrics_path = directory / "config.yaml", directory / "metrics.jsonl"
    if not config_path.exists() or not metrics_path.exists():
        raise ConfigError(f"{directory} is not a run directory (it needs config.yaml and metrics.jsonl); pass "
                          "the --output-dir of an `evotune train` or `evotune grpo` run.")
    config = _read_config(config_path)
    records = read_metrics(metrics_path)
    keys = {key for record in records for key in record if key.startswith("eval/")}
    metric = metric or ("eval/accuracy" if "eval/accuracy" in keys else "eval/reward")
    if metric not in keys:
        raise ConfigError(f"{directory} has no `{metric}` in metrics.jsonl (it has {sorted(keys)}); pick one with "
                          "--metric.")
    elapsed, samples, curve = 0.0, 0, []
    for record in records:  # cumulative training time and samples at every evaluation
        elapsed += record.get("time_s") or 0.0
        samples = record.get("samples_seen") or samples
        if _is_number(record.get(metric)):  # null (or NaN, from older runs): no value to compare
            curve.append({"samples": samples, "time_s": round(elapsed, 2), "value": record[metric]})
    if not curve:
        raise ConfigError(f"{metrics_path}: every `{metric}` value is null (NaN when logged), so the run has no "
                          "evaluation to compare; pick another --metric or leave this run out.")
    return {"run": str(directory), "method": method_label(config), "seed": config.get("seed"), "metric": metric,
            "num_eval": config.get("num_eval"), "curve": curve, "final": curve[-1]["value"],
            "samples_seen": samples, "train_time_s": round(elapsed, 1),
            "peak_rss_mib": max((r["peak_rss_mib"] for r in records if r.get("peak_rss_mib") is not None),
                                default=None),
            **warm_start(config)}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _read_config(path: Path) -> dict[str, Any]:
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path} is not valid UTF-8 YAML ({exc}); it was damaged after the run wrote it.") from exc
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ConfigError(f"{path} holds a YAML {type(config).__name__}, not a mapping of config keys; it was damaged "
                          "after the run wrote it.")
    return config


def warm_start(config: dict) -> dict[str, Any]:
    """The cost of the run's starting adapter when an `evotune sft` run made it (ESSA's stage 1).

    ES on an SFT adapter starts from a better model bought with labelled examples and gradient
    steps; the table shows that price next to the sampled-completion budget instead of hiding it.
    """
    adapter = config.get("adapter")
    metrics_path = Path(adapter).parent / "metrics.jsonl" if adapter else None
    if metrics_path is None or not metrics_path.exists():
        return {}
    records = [record for record in read_metrics(metrics_path) if "loss" in record]  # one per SFT step
    return {"warm_start_steps": len(records),
            # time_s is per step (the run-directory contract), so the warm start's time is their sum
            "warm_start_time_s": round(sum(record.get("time_s") or 0.0 for record in records), 1)}


def time_to_target(run: dict, target: float) -> dict[str, float | None]:
    """The first evaluation at or above `target`: cumulative time and samples then (None: never)."""
    for point in run["curve"]:
        if point["value"] >= target:
            return {"time_s": point["time_s"], "samples": point["samples"]}
    return {"time_s": None, "samples": None}


def value_at_budget(run: dict, budget: int) -> float | None:
    """The last evaluation made within `budget` sampled completions (None: none that early)."""
    within = [point["value"] for point in run["curve"] if point["samples"] <= budget]
    return within[-1] if within else None


def value_at_time(run: dict, seconds: float) -> float | None:
    """The last evaluation made within `seconds` of cumulative training time (None: none that early)."""
    within = [point["value"] for point in run["curve"] if point["time_s"] <= seconds]
    return within[-1] if within else None


def summarize(runs: list[dict], target: float | None, budget: int | None = None,
              budget_time: float | None = None) -> list[dict]:
    """One row per method: final metric mean, spread over seeds, a 95% interval, budgets, memory.

    `budget` (default: the smallest budget any run spent) adds each method's mean metric at that
    many sampled completions, so runs of unequal length still meet at one equal budget; `budget_time`
    does the same at equal training time (seconds), with the per-seed values and their spread.
    """
    budget = min(run["samples_seen"] for run in runs) if budget is None else budget
    rows = []
    for method in dict.fromkeys(run["method"] for run in runs):
        group = [run for run in runs if run["method"] == method]
        finals = np.array([run["final"] for run in group], dtype=float)
        at_budget = [value_at_budget(run, budget) for run in group]
        row = {"method": method, "runs": len(group),
               f"at_{budget}_samples": float(np.mean(at_budget)) if None not in at_budget else None,
               "final_mean": float(finals.mean()),
               "final_std": float(finals.std(ddof=1)) if len(group) > 1 else 0.0,
               "samples_seen": int(np.mean([run["samples_seen"] for run in group])),
               "train_time_s": float(np.mean([run["train_time_s"] for run in group])),
               "peak_rss_mib": max((run["peak_rss_mib"] or 0) for run in group) or None}
        if budget_time is not None:
            at_time = [value_at_time(run, budget_time) for run in group]
            label = f"at_{budget_time:g}s"
            row[label] = float(np.mean(at_time)) if None not in at_time else None
            row[f"{label}_per_seed"] = at_time
            row[f"{label}_std"] = (float(np.std(at_time, ddof=1)) if None not in at_time and len(group) > 1
                                   else None)
        if all("warm_start_time_s" in run for run in group):  # SFT steps and time before the ES budget
            row["warm_start_steps"] = int(np.mean([run["warm_start_steps"] for run in group]))
            row["warm_start_time_s"] = float(np.mean([run["warm_start_time_s"] for run in group]))
        if group[0]["metric"].endswith("accuracy") and all(run["num_eval"] for run in group):
            total = sum(run["num_eval"] for run in group)  # pooled over seeds' held-out sets
            row["final_ci95"] = list(wilson_interval(float(sum(r["final"] * r["num_eval"] for r in group)), total))
        if target is not None:
            reached = [time_to_target(run, target) for run in group]
            times = [r["time_s"] for r in reached if r["time_s"] is not None]
            row["reached_target"] = f"{len(times)}/{len(group)}"
            row["time_to_target_s"] = float(np.mean(times)) if times else None
        rows.append(row)
    return rows


def _plot(runs: list[dict], axis_key: str, path: Path, label: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(dict.fromkeys(run["method"] for run in runs))
    figure, axis = plt.subplots(figsize=(6.5, 4))
    for run in runs:
        color = f"C{methods.index(run['method'])}"
        xs = [point[axis_key] for point in run["curve"]]
        axis.plot(xs, [point["value"] for point in run["curve"]], marker="o", color=color, alpha=0.8,
                  label=f"{run['method']} (seed {run['seed']})")
    axis.set(xlabel=label, ylabel=f"held-out {runs[0]['metric']}", title=f"{runs[0]['metric']} vs {label}")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def compare_runs(run_dirs: list[str], output_dir: str, metric: str | None = None,
                 target: float | None = None, budget: int | None = None,
                 budget_time: float | None = None) -> dict[str, Any]:
    output = Path(output_dir)
    _check_output_dir(output)  # first: reading and plotting the runs may take a while
    runs = [load_run(directory, metric) for directory in run_dirs]
    metrics = {run["metric"] for run in runs}
    if len(metrics) > 1:
        raise ConfigError(f"the runs report different metrics ({sorted(metrics)}); choose one with --metric.")
    output.mkdir(parents=True, exist_ok=True)
    name = runs[0]["metric"].replace("eval/", "")
    _plot(runs, "samples", output / f"{name}_vs_samples.png", "sampled completions")
    _plot(runs, "time_s", output / f"{name}_vs_time.png", "training time (s)")
    if budget_time is not None and not budget_time > 0:
        raise ConfigError(f"--budget-time {budget_time}: give a positive number of seconds of training time.")
    summary = summarize(runs, target, budget, budget_time)
    result = {"metric": runs[0]["metric"], "target": target, "methods": summary, "runs": runs}
    (output / "compare.json").write_text(dumps_strict(result, indent=2))  # null, never NaN: strict JSON
    (output / "compare.md").write_text(format_markdown(summary, runs[0]["metric"]) + "\n")
    return result


def _check_output_dir(output: Path) -> None:
    """The nearest existing part of `output` must be a directory (compare writes several files into it)."""
    for part in (output, *output.parents):
        if part.exists():
            if not part.is_dir():
                raise ConfigError(f"--output {output}: {part} is a file; compare writes a directory (compare.json, "
                                  "compare.md and plots). Choose a directory path.")
            return


def format_markdown(rows: list[dict], metric: str) -> str:
    keys = [key for key in dict.fromkeys(key for row in rows for key in row) if key != "method"]
    lines = [f"| method | {' | '.join(keys)} |", "|---" * (len(keys) + 1) + "|"]
    for row in rows:
        cells = []
        for key in keys:
            value = row.get(key)
            if isinstance(value, float):
                cells.append(f"{value:.4g}")
            elif isinstance(value, list):
                cells.append("[" + ", ".join(f"{v:.3f}" for v in value) + "]")
            else:
                cells.append("" if value is None else str(value))
        lines.append(f"| {row['method']} | {' | '.join(cells)} |")
    return (f"{metric}; at_N_samples = mean of each seed's last evaluation within N sampled completions; final = "
            "last held-out evaluation\n\n" + "\n".join(lines))

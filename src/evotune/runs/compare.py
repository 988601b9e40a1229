"""`evotune compare RUN_DIR... --output-dir DIR`: several runs side by side, on the budgets that matter.

Both founding papers judge ES against GRPO by held-out accuracy per sampled completion and per
wall-clock minute. Any run directory that follows the run-directory contract (config.yaml +
metrics.jsonl with `samples_seen`, `time_s` and `eval/<metric>`) can be compared, whatever
method wrote it. Runs whose configs are equal apart from the seed (and keys that cannot change the
result: logging, evaluation and checkpoint cadence, Ray placement) are seeds of one method and
share a row with a mean and a spread; runs that differ in any other key are separate rows whose
labels name the keys, unless `--label DIR=NAME` names the method. A directory counts once, however
it is spelled.

Runs that logged `retain/<task>/<metric>` (`retention_tasks`) also get each method's final retention values, with
each seed's value when a method has several, in a second table.

Writes DIR/compare.json, DIR/compare.md (the tables and their notes) and DIR/<metric>_vs_samples.png,
DIR/<metric>_vs_time.png. Time is the cumulative training time (`time_s`), evaluation excluded.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..evaluation.statistics import wilson_interval
from ..tracking.tracker import dumps_strict, read_metrics
from .compare_output import format_markdown, plot_curves
from .groups import (
    group_runs,
    method_config,
    method_label,
    parse_labels,
    read_config_file,
    resolve_adapter,
    unique_directories,
)


def load_run(directory: str | Path, metric: str | None, notes: list[str] | None = None) -> dict[str, Any]:
    directory = Path(directory)
    config_path, metrics_path = directory / "config.yaml", directory / "metrics.jsonl"
    if not config_path.exists() or not metrics_path.exists():
        raise ConfigError(f"{directory} is not a run directory (it needs config.yaml and metrics.jsonl); pass "
                          "the --output-dir of an `evotune train` or `evotune grpo` run.")
    config = read_config_file(config_path)
    records = read_metrics(metrics_path)
    # what an evaluation logs: the task's metrics, the distance from the base, the retention tasks' scores and KL
    keys = {key for record in records for key in record if key.startswith(("eval/", "drift/", "retain/"))}
    metric = metric or ("eval/accuracy" if "eval/accuracy" in keys else "eval/reward")
    if metric not in keys:
        raise ConfigError(f"{directory} has no `{metric}` in metrics.jsonl (it has {sorted(keys)}); pick one with "
                          "--metric.")
    curve = [{"samples": record["samples"], "time_s": record["time_s"], "value": record[metric]}
             for record in evaluations(records, metric)]
    elapsed = sum(record.get("time_s") or 0.0 for record in records)
    samples = next((record["samples_seen"] for record in reversed(records) if record.get("samples_seen")), 0)
    if not curve:
        raise ConfigError(f"{metrics_path}: every `{metric}` value is null (NaN when logged), so the run has no "
                          "evaluation to compare; pick another --metric or leave this run out.")
    return {"run": str(directory), "method": method_label(config), "seed": seed_label(config), "metric": metric,
            "num_eval": config.get("num_eval"), "curve": curve, "final": curve[-1]["value"],
            "samples_seen": samples, "train_time_s": round(elapsed, 1),
            "peak_rss_mib": max((r["peak_rss_mib"] for r in records if r.get("peak_rss_mib") is not None),
                                default=None),
            "retain": final_retention(records), "iterations_done": iterations_done(records),
            "iterations_planned": config.get("iterations"), "task": task_label(config),
            **warm_start(config, directory, notes), "method_config": method_config(config, directory)}


def task_label(config: dict[str, Any]) -> str:
    """What a run was scored on: its task, with its task_args and dataset where it has them."""
    parts = [str(config.get("task", "?"))]
    if config.get("task_args"):
        parts.append(", ".join(f"{key}={value}" for key, value in sorted(config["task_args"].items())))
    if config.get("dataset"):
        parts.append(f"dataset {config['dataset']}")
    return parts[0] + (f" ({'; '.join(parts[1:])})" if len(parts) > 1 else "")


def note_different_tasks(runs: list[dict], notes: list[str]) -> None:
    """Runs scored on different tasks (or task arguments, or data) stand side by side only with a note that says so:
    their numbers measure different things. A row that pools several is named too."""
    tasks = list(dict.fromkeys(run["task"] for run in runs))
    if len(tasks) < 2:
        return
    by_task = "; ".join(f"{task}: {', '.join(run['run'] for run in runs if run['task'] == task)}" for task in tasks)
    notes.append(f"the runs are scored on {len(tasks)} different tasks ({by_task}): a number of one task says nothing "
                 "of another's, so compare rows within a task only.")
    for method in dict.fromkeys(run["method"] for run in runs):
        mixed = list(dict.fromkeys(run["task"] for run in runs if run["method"] == method))
        if len(mixed) > 1:
            notes.append(f"`{method}` pools runs of different tasks ({'; '.join(mixed)}): its mean mixes them.")


def iterations_done(records: list[dict[str, Any]]) -> int:
    """The last iteration a run logged (0: only its starting evaluation, or none)."""
    return max((record["iteration"] for record in records
                if isinstance(record.get("iteration"), int) and not isinstance(record["iteration"], bool)), default=0)


def note_unequal_progress(runs: list[dict], notes: list[str]) -> None:
    """A row that pools runs stopped at different iterations (one killed early beside a finished one) says so: its
    final_mean then averages evaluations made at different points of training."""
    for method in dict.fromkeys(run["method"] for run in runs):
        group = [run for run in runs if run["method"] == method]
        if len({run["iterations_done"] for run in group}) < 2:
            continue
        progress = ", ".join(f"{run['run']}: {run['iterations_done']}" + (
            f" of {run['iterations_planned']}" if isinstance(run["iterations_planned"], int) else "")
            for run in group)
        notes.append(f"`{method}` pools runs that completed different numbers of iterations ({progress}), so its "
                     "final values were evaluated at different points of training; read its at_N_samples column "
                     "(equal budget), or resume the unfinished runs (their command with --resume) or leave them out.")


def seed_label(config: dict[str, Any]) -> int | str | None:
    """A run's seed as compare shows it: `seed`, with `data_seed` beside it when the run set one apart."""
    seed, data_seed = config.get("seed"), config.get("data_seed")
    return seed if data_seed is None or data_seed == seed else f"{seed} (data_seed {data_seed})"


def evaluations(records: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    """The records holding a number for `metric` (null, or NaN from older runs: none to compare), each with
    `time_s` replaced by the cumulative training time up to it (time_s is per step in metrics.jsonl, evaluation
    excluded) and `samples` the samples seen by then."""
    elapsed, samples, out = 0.0, 0, []
    for record in records:
        elapsed += record.get("time_s") or 0.0
        samples = record.get("samples_seen") or samples
        if _is_number(record.get(metric)):
            out.append({**record, "time_s": round(elapsed, 2), "samples": samples})
    return out


def final_retention(records: list[dict[str, Any]]) -> dict[str, float | None]:
    """The last evaluation's `retain/<task>/<metric>` values (None: null when logged); {} without retention."""
    retained = [record for record in records if any(key.startswith("retain/") for key in record)]
    if not retained:
        return {}
    return {key: value if _is_number(value) else None for key, value in retained[-1].items()
            if key.startswith("retain/")}


def summarize_retention(runs: list[dict], notes: list[str] | None = None) -> list[dict]:
    """Per method with retention records: each final retain/ value's mean over its runs and, with several seeds,
    each seed's value (run order, as `seeds`) and their standard deviation. A run of the method without a value
    makes the mean null and is named in a note."""
    notes = [] if notes is None else notes
    rows = []
    for method in dict.fromkeys(run["method"] for run in runs):
        group = [run for run in runs if run["method"] == method]
        keys = sorted({key for run in group for key in run["retain"]})
        if not keys:
            continue
        row: dict[str, Any] = {"method": method, "runs": len(group)}
        if len(group) > 1:
            row["seeds"] = [run["seed"] for run in group]
        for key in keys:
            values = [run["retain"].get(key) for run in group]
            complete = None not in values
            if not complete:
                missing = [run["run"] for run, value in zip(group, values) if value is None]
                notes.append(f"`{method}` {key}: {', '.join(missing)} logged no value, so the method's mean is -.")
            row[key] = float(np.mean(values)) if complete else None
            if len(group) > 1:
                row[f"{key}_per_seed"] = values
                row[f"{key}_std"] = float(np.std(values, ddof=1)) if complete else None
        rows.append(row)
    return rows


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def warm_start(config: dict, run_dir: str | Path = ".", notes: list[str] | None = None) -> dict[str, Any]:
    """The cost of the run's starting adapter when an `evotune sft` run made it (ESSA's stage 1).

    ES on an SFT adapter starts from a better model bought with labelled examples and gradient
    steps; the table shows that price next to the sampled-completion budget instead of hiding it.
    A relative `adapter` is looked up from the working directory, then from the run directory; when
    neither holds it, or its SFT run lacks metrics.jsonl, a note names the missing file.
    """
    adapter, run_dir, notes = config.get("adapter"), Path(run_dir), [] if notes is None else notes
    if not adapter:
        return {}
    found = resolve_adapter(str(adapter), run_dir)
    if found is None:
        looked = [Path(adapter)] if Path(adapter).is_absolute() else [Path(adapter).absolute(),
                                                                        (run_dir / adapter).absolute()]
        notes.append(f"{run_dir / 'config.yaml'}: its adapter `{adapter}` is missing ({' and '.join(map(str, looked))}"
                     " do not exist), so its warm-start cost (SFT steps and time) is not shown; run compare from "
                     "where the run was started, or correct `adapter` in its config.yaml.")
        return {}
    metrics_path = found.parent / "metrics.jsonl"
    if not metrics_path.exists():
        if (found.parent / "config.yaml").exists():  # an evotune run made the adapter, but its record is gone
            notes.append(f"{metrics_path} is missing, so the warm-start cost of {run_dir} (the run that made its "
                         f"adapter {found}) is not shown.")
        return {}
    records = [record for record in read_metrics(metrics_path) if "loss" in record]  # one per SFT step
    return {"warm_start_steps": len(records),
            # time_s is per step (the run-directory contract), so the warm start's time is their sum
            "warm_start_time_s": round(sum(record.get("time_s") or 0.0 for record in records), 1)}


# --- which runs are one method ------------------------------------------------------------------------


# --- reading the runs at equal budgets ----------------------------------------------------------------


def check_budgets(target: float | None, budget: int | None, budget_time: float | None) -> None:
    """Refuse a reading point by its flag before any run is read or any file written."""
    if target is not None and not _is_number(target):
        raise ConfigError(f"--target {target}: give the metric value to reach, a finite number (e.g. 0.15 for "
                          "accuracy), or leave --target out.")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or budget < 0):
        raise ConfigError(f"--budget {budget}: give a number of sampled completions, a whole number >= 0 (e.g. "
                          "2560), or leave --budget out to use the smallest budget any run spent.")
    if budget_time is not None and not (_is_number(budget_time) and budget_time > 0):
        raise ConfigError(f"--budget-time {budget_time}: give a positive, finite number of seconds of training "
                          "time (e.g. 600), or leave --budget-time out.")


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


def _readings(method: str, group: list[dict], key: str, values: list[float | None], axis: str, within: str,
              notes: list[str], spread: bool) -> dict[str, Any]:
    """The mean of each run's reading at one budget (with `spread`: also per seed and their std). A run with
    no evaluation that early makes the mean null ("-" in the table), and a note says which run and why."""
    unit = " s" if axis == "time_s" else " sampled completions"
    missing = [f"{run['run']} (first at {run['curve'][0][axis]:g}{unit})" for run, value in zip(group, values)
               if value is None]
    if missing:
        notes.append(f"`{method}` {key}: {', '.join(missing)} had no evaluation within {within}, so the method's "
                     "mean there is shown as -.")
    row: dict[str, Any] = {key: float(np.mean(values)) if not missing else None}
    if spread:
        row[f"{key}_per_seed"] = values
        row[f"{key}_std"] = float(np.std(values, ddof=1)) if not missing and len(group) > 1 else None
    return row


def summarize(runs: list[dict], target: float | None, budget: int | None = None,
              budget_time: float | None = None, notes: list[str] | None = None) -> list[dict]:
    """One row per method: final metric mean, spread over seeds, a 95% interval, budgets, memory.

    `budget` (default: the smallest budget any run spent) adds each method's mean metric at that
    many sampled completions, so runs of unequal length still meet at one equal budget; `budget_time`
    does the same at equal training time (seconds), with the per-seed values and their spread.
    """
    notes = [] if notes is None else notes
    budget = min(run["samples_seen"] for run in runs) if budget is None else budget
    rows = []
    for method in dict.fromkeys(run["method"] for run in runs):
        group = [run for run in runs if run["method"] == method]
        finals = np.array([run["final"] for run in group], dtype=float)
        row = {"method": method, "runs": len(group),
               **_readings(method, group, f"at_{budget}_samples", [value_at_budget(run, budget) for run in group],
                           "samples", f"{budget} sampled completions", notes, spread=False),
               "final_mean": float(finals.mean()),
               "final_std": float(finals.std(ddof=1)) if len(group) > 1 else 0.0,
               "samples_seen": int(np.mean([run["samples_seen"] for run in group])),
               "train_time_s": float(np.mean([run["train_time_s"] for run in group])),
               "peak_rss_mib": max((run["peak_rss_mib"] or 0) for run in group) or None}
        row.update(seed_spread(group))
        if budget_time is not None:
            row.update(_readings(method, group, f"at_{budget_time:g}s", [value_at_time(run, budget_time)
                                                                         for run in group],
                                 "time_s", f"{budget_time:g} s of training", notes, spread=True))
        row.update(_warm_start_row(method, group, notes))
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


def seed_spread(group: list[dict], resamples: int = 2000) -> dict[str, Any]:
    """Run-to-run stability of a method with several seeds: each seed's final value (in run order, with the
    seeds), their range, and a bootstrap 95% interval of their standard deviation (seeds resampled with
    replacement; a fixed generator, so the table is reproducible). Nothing for a single run."""
    if len(group) < 2:
        return {}
    finals = np.array([run["final"] for run in group], dtype=float)  # (seeds,)
    draws = np.random.default_rng(0).choice(finals, size=(resamples, finals.size), replace=True)  # (resamples, seeds)
    stds = draws.std(axis=1, ddof=1)
    return {"seeds": [run["seed"] for run in group], "final_per_seed": finals.tolist(),
            "final_range": float(finals.max() - finals.min()),
            "final_std_ci95": [float(np.percentile(stds, 2.5)), float(np.percentile(stds, 97.5))]}


def _warm_start_row(method: str, group: list[dict], notes: list[str]) -> dict[str, Any]:
    """SFT steps and time before the ES budget, when every run of the row has them."""
    without = [run["run"] for run in group if "warm_start_time_s" not in run]
    if len(without) == len(group):
        return {}
    if without:
        notes.append(f"`{method}`: warm-start columns left out, since {', '.join(without)} have no warm-start "
                     "record (see the notes above).")
        return {}
    return {"warm_start_steps": int(np.mean([run["warm_start_steps"] for run in group])),
            "warm_start_time_s": float(np.mean([run["warm_start_time_s"] for run in group]))}


def compare_runs(run_dirs: Sequence[str | Path], output_dir: str | Path, metric: str | None = None,
                 target: float | None = None, budget: int | None = None, budget_time: float | None = None,
                 labels: Sequence[str] | Mapping[str, str] | None = None) -> dict[str, Any]:
    """Compare runs (see the module docstring). `labels`: `DIR=NAME` strings (or {DIR: NAME}) naming runs'
    methods, which overrides grouping by config. Every input is checked before anything is written."""
    check_budgets(target, budget, budget_time)
    notes: list[str] = []
    directories = unique_directories(run_dirs, notes)
    named = parse_labels(labels or [], directories)
    output = Path(output_dir)
    _check_output_dir(output)  # before reading: reading and plotting the runs may take a while
    runs = []
    for spelled, resolved in directories:
        runs.append({**load_run(spelled, metric, notes), "label": named.get(resolved)})
    metrics = {run["metric"] for run in runs}
    if len(metrics) > 1:
        raise ConfigError(f"the runs report different metrics ({sorted(metrics)}); choose one with --metric.")
    group_runs(runs, notes)
    note_different_tasks(runs, notes)
    note_unequal_progress(runs, notes)
    summary = summarize(runs, target, budget, budget_time, notes)
    retention = summarize_retention(runs, notes)
    result = {"metric": runs[0]["metric"], "target": target, "methods": summary, "retention": retention,
              "notes": notes, "runs": runs}
    text, markdown = dumps_strict(result, indent=2), format_markdown(summary, runs[0]["metric"], notes, retention)
    output.mkdir(parents=True, exist_ok=True)  # every input checked and every output formed: now write
    name = runs[0]["metric"].removeprefix("eval/").replace("/", "_")  # drift/l2 -> drift_l2_vs_samples.png
    plot_curves(runs, "samples", output / f"{name}_vs_samples.png", "sampled completions")
    plot_curves(runs, "time_s", output / f"{name}_vs_time.png", "training time (s)")
    (output / "compare.json").write_text(text)  # null, never NaN: strict JSON
    (output / "compare.md").write_text(markdown + "\n")
    return result


def _check_output_dir(output: Path) -> None:
    """The nearest existing part of `output` must be a directory (compare writes several files into it)."""
    for part in (output, *output.parents):
        if part.exists():
            if not part.is_dir():
                raise ConfigError(f"--output-dir {output}: {part} is a file; compare writes a directory (compare.json, "
                                  "compare.md and plots). Choose a directory path.")
            return

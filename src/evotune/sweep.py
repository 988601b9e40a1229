"""`evotune sweep`: one run per grid point and seed, resumable, with a table and a heatmap.

    evotune sweep examples/arithmetic.yaml --grid sigma=1e-3,2e-3,4e-3 --grid learning_rate=2e-3,4e-3 \\
        --seeds 0 1 --output-dir runs/sweep

`--parallel N` runs N of them at once as Ray tasks (a local Ray instance, or a cluster), each with
`--cpus-per-run` cores; a run that fails is reported by name once the others are done.

Each run is an ordinary run directory, `OUTPUT/<key=value,...>/seed<N>`, so any of them can be
evaluated, compared or resumed on its own. Re-running the same command skips finished runs and
resumes interrupted ones from their checkpoints. `--command grpo` sweeps the GRPO baseline's keys
(e.g. its learning rate) the same way. The table gives, per grid point, the final and best held-out
metric (mean over seeds and each seed), the training time and the sampled completions; the heatmap
shows the final metric over the first two grid keys (ESSA's rank x population x alpha grids).
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from .config.files import absolutize_paths
from .config.grpo import GRPORunConfig
from .config.train import TrainConfig
from .errors import ConfigError, EvotuneError
from .estimate.report import build
from .files.checkpoint import find_checkpoint
from .runs.directory import final_is_complete, writing
from .runs.sweep_grid import GridPoint, grid_points, point_directories
from .tracking.tracker import dumps_strict, read_metrics

STATES = {"done": "skipped (done)", "partial": "partial", "new": "new"}


class SweepFailed(EvotuneError):
    """Some runs of a sweep failed; `result` is the table of the others (also in sweep.json and sweep.md)."""

    def __init__(self, message: str, result: dict[str, Any]):
        super().__init__(message)
        self.result = result


def training_seconds(records: list[dict]) -> float:
    """Training time of a run: the summed step times (`time_s` of the records that trained)."""
    return sum(record.get("time_s", 0.0) for record in records if "samples_seen" in record)


def run_state(directory: Path, iterations: int, max_training_seconds: float = 0.0, command: str = "train") -> str:
    """done (a complete final/ written after the last iteration, or once `max_training_seconds` of training
    were spent), partial (a checkpoint: resumed, which also writes an incomplete final/ again), or new."""
    metrics = directory / "metrics.jsonl"
    if final_is_complete(directory / "final", command) and metrics.exists():
        records = read_metrics(metrics)
        steps = [record.get("iteration", 0) for record in records]
        trained = training_seconds(records)
        if steps and (max(steps) >= iterations or (max_training_seconds and trained >= max_training_seconds)):
            return "done"
    from .baselines.grpo import complete_checkpoints  # a TRL checkpoint cut short by a kill does not count

    if find_checkpoint(directory / "checkpoint") is not None or complete_checkpoints(directory):
        return "partial"
    return "new"


def _run_one(command: str, values: dict[str, Any], directory: Path, state: str) -> None:
    """One run, in this process, through the same code as `evotune train` / `evotune grpo`."""
    final = directory / "final"
    if state == "partial" and final.exists() and not final_is_complete(final, command):
        shutil.rmtree(final)  # torn by a kill while it was written: the resume writes all of it again
    if command == "grpo":
        from .baselines.grpo import GRPORunConfig, run_grpo

        run_grpo(GRPORunConfig.from_dict(values, source="sweep"), str(directory), resume=state == "partial",
                 overwrite=state == "new")
        return
    from .trainer import Trainer

    # a run that died before its first checkpoint left files but nothing to resume: start it over
    Trainer(TrainConfig.from_dict(values, source="sweep"), directory, resume=state == "partial",
            overwrite=state == "new").train()


def summarize_run(directory: Path, metric: str) -> dict[str, Any]:
    records = read_metrics(directory / "metrics.jsonl")
    evaluated = [r[metric] for r in records if r.get(metric) is not None]
    trained = [r for r in records if "samples_seen" in r]
    return {"final": evaluated[-1] if evaluated else None, "best": max(evaluated) if evaluated else None,
            "start": evaluated[0] if evaluated else None,
            "time_s": training_seconds(records),
            "samples": trained[-1]["samples_seen"] if trained else 0}


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


# A sweep this large, or this long, starts only with --yes: a typo in --grid (or one --seeds too many) can mean days.
SWEEP_CONFIRM_RUNS = 100
SWEEP_CONFIRM_HOURS = 24.0


def announce(command: str, base: dict[str, Any], grid: list[tuple[str, list[Any]]], seeds: list[int], parallel: int,
             yes: bool) -> None:
    """Print how many runs the sweep starts and about how long they take (`evotune estimate` of its first point,
    times the runs, over `parallel`); above SWEEP_CONFIRM_RUNS runs or SWEEP_CONFIRM_HOURS hours, refuse unless
    `yes` (--yes)."""
    runs = math.prod(len(values) for _, values in grid) * len(seeds)
    first = {**base, **{key: values[0] for key, values in grid}, "seed": seeds[0]}
    config_class = {"train": TrainConfig, "grpo": GRPORunConfig}.get(command, TrainConfig)
    try:
        config = config_class.from_dict(first)
        per_iteration = build(command, config)[0].seconds_per_iteration
        hours = None if per_iteration is None else per_iteration * config.iterations * runs / max(parallel, 1) / 3600
    except Exception:  # noqa: BLE001 - a point the estimate cannot read (its own check names it when the sweep starts)
        hours = None
    took = "time unknown" if hours is None else f"about {hours:,.1f} hours by `evotune estimate` of its first point " \
        f"on the scaling study's machine ({max(parallel, 1)} at a time)"
    print(f"evotune: this sweep starts {runs:,} runs ({took})", file=sys.stderr)
    if (runs > SWEEP_CONFIRM_RUNS or (hours or 0) > SWEEP_CONFIRM_HOURS) and not yes:
        raise ConfigError(f"this sweep starts {runs:,} runs ({took}), over the {SWEEP_CONFIRM_RUNS} runs or "
                          f"{SWEEP_CONFIRM_HOURS:g} hours that start only when asked: check --grid and --seeds, then "
                          "pass --yes to start it.")


def sweep(base: dict[str, Any], grid: list[tuple[str, list[Any]]], seeds: list[int], output: str | Path,
          command: str = "train", metric: str | None = None, parallel: int = 1, cpus_per_run: float = 1,
          ray_address: str | None = None) -> dict[str, Any]:
    """Run (or skip, or resume) every grid point x seed, then write sweep.json, sweep.md and the heatmap.

    Every run's config is checked before the first run starts. parallel > 1: the runs go to Ray tasks,
    `parallel` at once with `cpus_per_run` cores each, on a local Ray instance or the cluster at
    `ray_address`. A run that fails does not stop the others: the table of those written, SweepFailed
    names the failed ones."""
    _check_arguments(grid, seeds, command, parallel, cpus_per_run)
    output = Path(output)
    if output.exists() and not output.is_dir():
        raise ConfigError(f"--output-dir {output} is a file; give a directory for the sweep's runs.")
    points = grid_points(grid)
    configs = {(point, seed): {**base, **dict(point.values), "seed": seed} for point in points for seed in seeds}
    typed = _validate(command, configs)
    directories = point_directories(output, points, {point: typed[point, seeds[0]].to_dict() for point in points})
    with writing(output):  # one sweep per directory; each run locks its own directory too
        pending = _plan(command, configs, typed, directories)  # {(point, seed): (name, run)} of the runs to do
        failures = _run_all(list(pending.values()), parallel, cpus_per_run, ray_address)
        failed = {run: _describe(failures[name]) for run, (name, _) in pending.items() if name in failures}
        message = _failure_message(failed, len(pending), output)
        try:
            result = write_table(output, points, seeds, [key for key, _ in grid], metric, directories, failed)
        except ConfigError as error:  # an unknown --metric: the failures must still be named
            raise ConfigError(f"{error} {message}".strip()) from error
    if failures:
        raise SweepFailed(message, result)
    return result


def _check_arguments(grid: list[tuple[str, list[Any]]], seeds: list[int], command: str, parallel: int,
                     cpus_per_run: float) -> None:
    if command not in ("train", "grpo"):
        raise ConfigError(f"--command {command!r}: choose train or grpo.")
    if not (isinstance(parallel, int) and parallel >= 1) or not cpus_per_run > 0:
        raise ConfigError(f"--parallel {parallel} / --cpus-per-run {cpus_per_run}: give a whole number of runs "
                          ">= 1 and a positive number of cores per run.")
    if any(key == "seed" for key, _ in grid):
        raise ConfigError("sweep seeds with --seeds 0 1 ..., not --grid seed=...")
    if not seeds:
        raise ConfigError("--seeds is empty; give at least one seed, e.g. --seeds 0.")
    repeated = sorted({seed for seed in seeds if list(seeds).count(seed) > 1})
    if repeated:  # the same run would be run once and counted twice in the table's mean
        raise ConfigError(f"--seeds {' '.join(map(str, seeds))} repeats {', '.join(map(str, repeated))}; give each "
                          "seed once.")


def _validate(command: str, configs: dict) -> dict:
    """The typed config of every (point, seed), all checked before any run starts; the bad ones are named
    together, and two points that give the same config are refused."""
    if command == "grpo":
        from .baselines.grpo import GRPORunConfig as Config
    else:
        from .config.train import TrainConfig as Config
    typed, problems = {}, []
    for (point, seed), values in configs.items():
        source = f"sweep point {point.name}, seed {seed}"
        try:
            typed[point, seed] = Config.from_dict(values, source=source)
            if command == "train":  # as its config.yaml will record them, so a re-run compares like with like
                absolutize_paths(typed[point, seed])
        except ConfigError as error:  # not every check's message names its source: the point is named here
            problems.append(str(error) if source in str(error) else f"{source}: {error}")
    if problems:
        more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        shown = "; ".join(problems[:5]) + more
        raise ConfigError(f"{len(problems)} of {len(configs)} sweep runs have a bad config, so none was started: "
                          f"{shown}")
    seen: dict[str, GridPoint] = {}
    for (point, _seed), config in typed.items():
        same = seen.setdefault(json.dumps(config.to_dict(), sort_keys=True, default=repr), point)
        if same != point:
            raise ConfigError(f"sweep points {same.name} and {point.name} give the same config (the values read "
                              "as the same setting), so one run would be counted twice; give each value once.")
    return typed


def _plan(command: str, configs: dict, typed: dict, directories: dict[GridPoint, Path]) -> dict:
    """{(point, seed): (name, run)} of the runs not yet done; an existing run must be its point's run."""
    pending = {}
    for (point, seed), values in configs.items():
        directory = directories[point] / f"seed{seed}"
        config = typed[point, seed]
        state = run_state(directory, config.iterations, config.max_training_seconds, command)
        if state != "new" and command == "train":
            from .runs.directory import check_resume

            check_resume(directory, config)
        elif state != "new":  # a GRPO point run before with other settings is refused, never "skipped (done)"
            from .baselines.grpo import check_grpo_resume

            check_grpo_resume(directory, config)
        torn = state == "partial" and (directory / "final").exists() and not final_is_complete(directory / "final",
                                                                                                  command)
        note = " (final/ incomplete: resumed to write it again)" if torn else ""
        print(f"evotune sweep: {point.name} seed {seed}: {STATES[state]}{note}", flush=True)
        if state != "done":
            pending[point, seed] = (f"{point.name} seed {seed}", partial(_run_one, command, values, directory, state))
    return pending


def _run_all(runs: list[tuple[str, Callable[[], None]]], parallel: int, cpus_per_run: float,
             ray_address: str | None) -> dict[str, BaseException]:
    """{name: error} of the runs that failed; a failure does not stop the others (Ctrl-C does)."""
    if parallel > 1 and runs:
        from .distributed.ray import run_tasks

        return run_tasks(runs, parallel, cpus_per_run, ray_address)
    failures = {}
    for name, run in runs:
        try:
            run()
        except Exception as error:  # noqa: BLE001 - any run's failure is named now and at the end; the next starts
            print(f"evotune sweep: {name}: failed: {_describe(error)}", file=sys.stderr, flush=True)
            failures[name] = error
    return failures


def _describe(error: BaseException) -> str:
    """An evotune error's message; any other error with its type, which is half of what it says."""
    return str(error) if isinstance(error, EvotuneError) else f"{type(error).__name__}: {error}"


def _failure_message(failed: dict, attempted: int, output: Path) -> str:
    if not failed:
        return ""
    named = "; ".join(f"{point.name} seed {seed}: {error}" for (point, seed), error in failed.items())
    return (f"{len(failed)} of {attempted} sweep runs failed: {named}. The table of the others is in "
            f"{output / 'sweep.md'}; re-run the same command to retry the failed ones (finished runs are skipped).")


def write_table(output: Path, points: list[GridPoint], seeds: list[int], keys: list[str], metric: str | None,
                directories: dict[GridPoint, Path] | None = None, failed: dict | None = None) -> dict[str, Any]:
    """sweep.json, sweep.md and heatmap.png of the finished runs; `failed` ({(point, seed): error}) are
    left out of the numbers and listed under the table."""
    directories = directories or {point: output / point.directory_name for point in points}
    failed = failed or {}
    finished = {(point, seed): directories[point] / f"seed{seed}" for point in points for seed in seeds
                if (point, seed) not in failed}
    metric = _resolve_metric(metric, list(finished.values()))
    rows = []
    for point in points:
        runs = [summarize_run(finished[point, seed], metric) if (point, seed) in finished else None for seed in seeds]
        done = [run for run in runs if run is not None]
        if not done:  # every seed of the point failed: no row, the failures below the table
            continue
        rows.append({**dict(point.values), "final_mean": _mean([r["final"] for r in done]),
                     "best_mean": _mean([r["best"] for r in done]), "start_mean": _mean([r["start"] for r in done]),
                     "final_per_seed": [r["final"] if r else None for r in runs],
                     "time_s_mean": _mean([r["time_s"] for r in done]), "samples": max(r["samples"] for r in done)})
    result = {"metric": metric, "keys": keys, "seeds": seeds, "rows": rows,
              "failed": [{"point": point.name, "seed": seed, "directory": str(directories[point] / f"seed{seed}"),
                          "error": error} for (point, seed), error in failed.items()]}
    output.mkdir(parents=True, exist_ok=True)
    (output / "sweep.json").write_text(dumps_strict(result, indent=2))
    (output / "sweep.md").write_text(format_table(result))
    if len(keys) >= 2 and rows:
        heatmap(result, output / "heatmap.png")
    return result


def _resolve_metric(requested: str | None, runs: list[Path]) -> str:
    """--metric, checked against what the runs logged; by default eval/accuracy, else eval/reward."""
    logged = sorted({key for run in runs for record in read_metrics(run / "metrics.jsonl") for key in record})
    if requested is None:
        return "eval/accuracy" if "eval/accuracy" in logged else "eval/reward"
    if runs and requested not in logged:
        held_out = [key for key in logged if key.startswith("eval/")]
        others = [key for key in logged if not key.startswith("eval/")]
        raise ConfigError(f"--metric {requested}: no run of this sweep logged it. Their held-out metrics: "
                          f"{', '.join(held_out) or 'none'} (other logged keys: {', '.join(others)}). Re-run the same "
                          "command with one of them: finished runs are skipped, so only the table is written.")
    return requested


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def format_table(result: dict[str, Any]) -> str:
    keys, metric = result["keys"], result["metric"]
    header = [*keys, f"final {metric}", "per seed", f"best {metric}", "start", "train time (s)", "samples"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in sorted(result["rows"], key=lambda r: -(r["final_mean"] if r["final_mean"] is not None else -1e300)):
        cells = [*(str(row[key]) for key in keys), _fmt(row["final_mean"]),
                 " / ".join(_fmt(v) for v in row["final_per_seed"]), _fmt(row["best_mean"]), _fmt(row["start_mean"]),
                 _fmt(row["time_s_mean"]), str(row["samples"])]
        lines.append("| " + " | ".join(cells) + " |")
    failed = result.get("failed", [])
    if failed:  # named under the table, so a table with fewer rows is never read as the whole sweep
        lines += ["", f"{len(failed)} run(s) failed (re-run the sweep to retry them):"]
        lines += [f"- {run['point']} seed {run['seed']}: {run['error']}" for run in failed]
    return "\n".join(lines) + "\n"


def panel_grids(result: dict[str, Any]) -> tuple[list[str], list[str], dict[str | None, Any]]:
    """(x labels, y labels, {panel: (len(y), len(x)) array of the final metric}) over the first two grid
    keys, one panel per value of a third key (None: no third key); further keys are averaged over."""
    import numpy as np

    keys, rows = result["keys"], result["rows"]
    first, second = keys[:2]
    third = keys[2] if len(keys) > 2 else None
    xs = list(dict.fromkeys(repr(row[first]) for row in rows))
    ys = list(dict.fromkeys(repr(row[second]) for row in rows))
    panels = list(dict.fromkeys(repr(row[third]) for row in rows)) if third else [None]
    grids = {}
    for panel in panels:
        grid = np.full((len(ys), len(xs)), np.nan)  # (y, x)
        for i, y in enumerate(ys):
            for j, x in enumerate(xs):
                cell = [r["final_mean"] for r in rows if repr(r[first]) == x and repr(r[second]) == y
                        and (third is None or repr(r[third]) == panel) and r["final_mean"] is not None]
                if cell:
                    grid[i, j] = float(np.mean(cell))
        grids[panel if panel is None else panel.strip("'")] = grid
    return [x.strip("'") for x in xs], [y.strip("'") for y in ys], grids


def heatmap(result: dict[str, Any], path: Path) -> Path:
    """Final metric (mean over seeds) over the first two grid keys, one panel per value of a third key
    (ESSA's rank x population x alpha figures); further keys are averaged over."""
    import matplotlib

    matplotlib.use("Agg")
    import textwrap

    import matplotlib.pyplot as plt
    import numpy as np

    xs, ys, grids = panel_grids(result)
    keys = result["keys"]
    values = [r["final_mean"] for r in result["rows"] if r["final_mean"] is not None]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    title = f"final {result['metric']} (mean of {len(result['seeds'])} seeds)"
    figure, axes = plt.subplots(1, len(grids), figsize=(len(grids) * (1.4 * len(xs) + 2.5), 1.0 * len(ys) + 2),
                                squeeze=False, layout="constrained")  # room for every panel's labels and titles
    for axis, (panel, grid) in zip(axes[0], grids.items()):
        image = axis.imshow(grid, cmap="viridis", origin="lower", aspect="auto", vmin=low, vmax=high)
        axis.set_xticks(range(len(xs)), xs)
        axis.set_yticks(range(len(ys)), ys)
        axis.set(xlabel=keys[0], ylabel=keys[1])
        # a panel's value may be long (an adapter path): wrapped, so neighbouring titles do not overlap
        axis.set_title(title if panel is None else textwrap.fill(f"{keys[2]}={panel}", 32), fontsize=9)
        for i in range(len(ys)):
            for j in range(len(xs)):
                if not np.isnan(grid[i, j]):
                    axis.text(j, i, f"{grid[i, j]:.3g}", ha="center", va="center", color="white")
    figure.colorbar(image, ax=list(axes[0]))
    if len(grids) > 1:
        figure.suptitle(title)
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)
    return path

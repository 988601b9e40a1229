"""`evotune sweep`: one run per grid point and seed, resumable, with a table and a heatmap.

    evotune sweep examples/arithmetic.yaml --grid sigma=1e-3,2e-3,4e-3 --grid learning_rate=2e-3,4e-3 \\
        --seeds 0 1 --output runs/sweep

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

import itertools
import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

import yaml

from .errors import ConfigError, EvotuneError


@dataclass(frozen=True, eq=False)
class GridPoint:
    values: tuple[tuple[str, Any], ...]  # ((key, value), ...) in --grid order; values may be lists or dicts

    @property
    def name(self) -> str:
        return ",".join(f"{key}={value}" for key, value in self.values)

    # by name, so a point whose value is a list or a dict (`parameters=[mlp]`, `task_args={...}`) is a dict key
    def __eq__(self, other: object) -> bool:
        return isinstance(other, GridPoint) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


def parse_grid(specs: list[str]) -> list[tuple[str, list[Any]]]:
    """`KEY=V1,V2,...` -> (key, [values]); values are YAML scalars (`2e-3` -> 0.002, `true`, `[q_proj]`)."""
    grid: list[tuple[str, list[Any]]] = []
    for spec in specs:
        key, sep, text = spec.partition("=")
        key = key.strip()
        if not sep or not key or not text.strip():
            raise ConfigError(f"--grid {spec!r}: write KEY=V1,V2,... e.g. --grid sigma=1e-3,2e-3.")
        if key in dict(grid):
            raise ConfigError(f"--grid names `{key}` twice; give all its values in one --grid {key}=V1,V2,...")
        values = [_scalar(part) for part in _split(text)]
        if len(set(map(repr, values))) != len(values):
            raise ConfigError(f"--grid {spec!r} repeats a value.")
        grid.append((key, values))
    if not grid:
        raise ConfigError("evotune sweep needs at least one --grid KEY=V1,V2,...")
    return grid


def _split(text: str) -> list[str]:
    """Split on commas outside brackets, so a list value `[q_proj,v_proj]` stays one value."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += (char in "[{") - (char in "]}")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [part.strip() for part in [*parts, current]]


def _scalar(text: str) -> Any:
    value = yaml.safe_load(text)
    if isinstance(value, str):  # YAML 1.1 reads 2e-3 (no dot) as a string
        try:
            return float(value) if any(c in value for c in "eE.") else value
        except ValueError:
            return value
    return value


def grid_points(grid: list[tuple[str, list[Any]]]) -> list[GridPoint]:
    keys = [key for key, _ in grid]
    return [GridPoint(tuple(zip(keys, combination))) for combination in itertools.product(*(v for _, v in grid))]


def run_directory(output: Path, point: GridPoint, seed: int) -> Path:
    return output / point.name.replace("/", "_") / f"seed{seed}"


def training_seconds(records: list[dict]) -> float:
    """Training time of a run: the summed step times (`time_s` of the records that trained)."""
    return sum(record.get("time_s", 0.0) for record in records if "samples_seen" in record)


def run_state(directory: Path, iterations: int, max_training_seconds: float = 0.0) -> str:
    """done (final/ written after the last iteration, or once `max_training_seconds` of training were
    spent), partial (a checkpoint), or new."""
    from .checkpoint import find_checkpoint
    from .tracking import read_metrics

    metrics = directory / "metrics.jsonl"
    if (directory / "final").exists() and metrics.exists():
        records = read_metrics(metrics)
        steps = [record.get("iteration", 0) for record in records]
        trained = training_seconds(records)
        if steps and (max(steps) >= iterations or (max_training_seconds and trained >= max_training_seconds)):
            return "done"
    if find_checkpoint(directory / "checkpoint") is not None or list((directory / "trl").glob("checkpoint-*")):
        return "partial"
    return "new"


def _run_one(command: str, values: dict[str, Any], directory: Path, state: str) -> None:
    """One run, in this process, through the same code as `evotune train` / `evotune grpo`."""
    if command == "grpo":
        from .baselines.grpo import GRPORunConfig, run_grpo

        run_grpo(GRPORunConfig.from_dict(values, source="sweep"), str(directory), resume=state == "partial")
        return
    from .config import TrainConfig
    from .trainer import Trainer

    # a run that died before its first checkpoint left files but nothing to resume: start it over
    Trainer(TrainConfig.from_dict(values, source="sweep"), directory, resume=state == "partial",
            overwrite=state == "new").train()


def summarize_run(directory: Path, metric: str) -> dict[str, Any]:
    from .tracking import read_metrics

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


def sweep(base: dict[str, Any], grid: list[tuple[str, list[Any]]], seeds: list[int], output: str | Path,
          command: str = "train", metric: str | None = None, parallel: int = 1, cpus_per_run: float = 1,
          ray_address: str | None = None) -> dict[str, Any]:
    """Run (or skip, or resume) every grid point x seed, then write sweep.json, sweep.md and the heatmap.

    parallel > 1: the runs go to Ray tasks, `parallel` at once with `cpus_per_run` cores each, on a local
    Ray instance or the cluster at `ray_address`; a failed run is reported after the others finished."""
    if command not in ("train", "grpo"):
        raise ConfigError(f"--command {command!r}: choose train or grpo.")
    if not (isinstance(parallel, int) and parallel >= 1) or not cpus_per_run > 0:
        raise ConfigError(f"--parallel {parallel} / --cpus-per-run {cpus_per_run}: give a whole number of runs "
                          ">= 1 and a positive number of cores per run.")
    output = Path(output)
    if output.exists() and not output.is_dir():
        raise ConfigError(f"--output {output} is a file; give a directory for the sweep's runs.")
    points = grid_points(grid)
    for key, _ in grid:
        if key == "seed":
            raise ConfigError("sweep seeds with --seeds 0 1 ..., not --grid seed=...")
    configs = {(point, seed): {**base, **dict(point.values), "seed": seed} for point in points for seed in seeds}
    typed = _validate(command, configs)  # every point's config is checked before the first run starts
    pending: list[tuple[str, Callable[[], None]]] = []
    for (point, seed), values in configs.items():
        directory = run_directory(output, point, seed)
        config = typed[point, seed]
        state = run_state(directory, config.iterations, config.max_training_seconds)
        if state != "new" and command == "train":  # an existing run must be this grid point's run
            from .config import TrainConfig
            from .run_directory import check_resume

            check_resume(directory, TrainConfig.from_dict(values, source="sweep"))
        print(f"evotune sweep: {point.name} seed {seed}: {'skipped (done)' if state == 'done' else state}",
              flush=True)
        if state != "done":
            pending.append((f"{point.name} seed {seed}", partial(_run_one, command, values, directory, state)))
    if parallel == 1:
        for _, run in pending:
            run()
    elif pending:
        from .distributed.ray import run_tasks

        failures = run_tasks(pending, parallel, cpus_per_run, ray_address)
        if failures:
            raise EvotuneError(f"{len(failures)} of {len(pending)} sweep runs failed (re-run the sweep to retry them; "
                               "finished runs are kept): " + "; ".join(f"{name}: {error}" for name, error in
                                                                      failures.items()))
    return write_table(output, points, seeds, [key for key, _ in grid], metric or _default_metric(output, points, seeds))


def _validate(command: str, configs: dict) -> dict:
    """The typed config of every (point, seed); the first bad one raises, naming its point."""
    if command == "grpo":
        from .baselines.grpo import GRPORunConfig as Config
    else:
        from .config import TrainConfig as Config
    return {(point, seed): Config.from_dict(values, source=f"sweep point {point.name}, seed {seed}")
            for (point, seed), values in configs.items()}


def _default_metric(output: Path, points: list[GridPoint], seeds: list[int]) -> str:
    from .tracking import read_metrics

    first = run_directory(output, points[0], seeds[0]) / "metrics.jsonl"
    keys = {key for record in read_metrics(first) for key in record}
    return "eval/accuracy" if "eval/accuracy" in keys else "eval/reward"


def write_table(output: Path, points: list[GridPoint], seeds: list[int], keys: list[str],
                metric: str) -> dict[str, Any]:
    from .tracking import dumps_strict

    rows = []
    for point in points:
        runs = [summarize_run(run_directory(output, point, seed), metric) for seed in seeds]
        rows.append({**dict(point.values), "final_mean": _mean([r["final"] for r in runs]),
                     "best_mean": _mean([r["best"] for r in runs]), "start_mean": _mean([r["start"] for r in runs]),
                     "final_per_seed": [r["final"] for r in runs], "time_s_mean": _mean([r["time_s"] for r in runs]),
                     "samples": max(r["samples"] for r in runs)})
    result = {"metric": metric, "keys": keys, "seeds": seeds, "rows": rows}
    (output / "sweep.json").write_text(dumps_strict(result, indent=2))
    (output / "sweep.md").write_text(format_table(result))
    if len(keys) >= 2:
        heatmap(result, output / "heatmap.png")
    return result


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
    import matplotlib.pyplot as plt
    import textwrap

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

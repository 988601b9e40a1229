"""Run logging: metrics.jsonl (the CLI contract), the `report_to` loggers (TensorBoard, W&B, Trackio: see
evotune.tracking.loggers), and learning-curve plots.

metrics.jsonl holds strict JSON, one object per line: a NaN or infinite value (e.g. a reward
when every sample was skipped) is written as null, because `NaN` is not JSON and most readers
(jq, JavaScript, pandas' strict mode) reject the whole file over it.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError
from .loggers import build_loggers


def peak_memory_mib() -> float:
    """Peak resident memory of this process so far (Linux ru_maxrss is in KiB), plus CUDA's peak."""
    import resource

    import torch

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if torch.cuda.is_available():
        peak += torch.cuda.max_memory_allocated() / 2**20
    return round(peak, 1)


def out_of_time(training_seconds: float, max_training_seconds: float, last_step_seconds: float = 0.0) -> bool:
    """Whether a run with a `max_training_seconds` budget (0: none) should take no further step; shared by the ES
    loop and the GRPO baseline so both methods stop by the same rule. A run stops at the step boundary nearest its
    budget, judged by its last step's time: another step that would end further past the budget than the run is
    short of it is not taken. So methods with long steps (an ES iteration) and short ones (a GRPO step) train
    for the budget on average, neither up to a whole step longer."""
    if not max_training_seconds:
        return False
    return training_seconds >= max_training_seconds or training_seconds + last_step_seconds / 2 > max_training_seconds


def projected_iterations(iterations: int, done: int, seconds: float, budget: float) -> int:
    """Where a run with a time budget will stop: `iterations`, or sooner the iteration its budget runs out at, at the
    seconds per iteration so far (summed over resumes). The progress bar's total, in the ES loop and GRPO's alike: a
    budgeted run sets `iterations` far past where it stops, and a bar over those showed an ETA of 60,000 hours for a
    two-hour run. No budget (0), or nothing measured yet: `iterations`."""
    if not budget or done <= 0 or seconds <= 0:
        return iterations
    return max(done, min(iterations, math.ceil(budget * done / seconds)))


def strict_json(value: Any) -> Any:
    """`value` with NaN and infinities replaced by None (JSON null) and numpy scalars made Python ones."""
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.ndarray):
        return strict_json(value.tolist())
    if isinstance(value, dict):
        return {key: strict_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(item) for item in value]
    return value


def dumps_strict(value: Any, **kwargs: Any) -> str:
    """json.dumps that writes null for NaN/Infinity (and fails rather than write them)."""
    return json.dumps(strict_json(value), allow_nan=False, **kwargs)


class MetricsLogger:
    """Appends one JSON object per iteration; on resume drops lines past the checkpoint.

    step_key names the record's x-axis: "iteration" for ES, "step" for `evotune sft`'s optimizer steps.
    Every record also goes to the `report_to` loggers, which start with `config` (the resolved config).
    """

    def __init__(self, output_dir: Path, report_to: list[str], resume_iteration: int | None = None,
                 step_key: str = "iteration", config: dict[str, Any] | None = None):
        self.path = Path(output_dir) / "metrics.jsonl"
        self.step_key = step_key
        if resume_iteration is not None and self.path.exists():
            records, damaged = good_prefix(self.path)
            if damaged is not None:  # one way forward: the records before the damage are kept, with a note
                print(f"evotune: note: {self.path} is damaged from line {damaged} on (not one JSON record per line "
                      f"of UTF-8 text); --resume keeps the {len(records)} records before it, and the iterations "
                      "from the checkpoint on are logged again.", file=sys.stderr, flush=True)
            kept = [record for record in records if self._step(record) <= resume_iteration]
            self.path.write_text("".join(dumps_strict(record) + "\n" for record in kept))
        elif resume_iteration is None:
            self.path.write_text("")
        # TensorBoard, W&B, Trackio (evotune.tracking.loggers): every record, the config, samples, the final curves
        self.loggers = build_loggers(report_to, Path(output_dir), resume_iteration, step_key,
                                     strict_json(config) if config else None)

    def _step(self, record: dict[str, Any]) -> int:
        step = record.get(self.step_key)
        if not isinstance(step, int):
            raise DataError(f"{self.path}: a record has no whole-number `{self.step_key}` "
                            f"({dumps_strict(record):.120}); the file was edited after the run wrote it. Delete that "
                            "line to resume.")
        return step

    def log(self, record: dict[str, Any]) -> None:
        record = strict_json(record)
        with self.path.open("a") as handle:
            handle.write(dumps_strict(record) + "\n")
        metrics = {key: value for key, value in record.items() if key != self.step_key}
        for logger in self.loggers:
            logger.log_metrics(record[self.step_key], metrics)

    def log_config(self, config: dict[str, Any]) -> None:
        for logger in self.loggers:
            logger.log_config(strict_json(config))

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        """Held-out prompts with completions and rewards, as a table in each logger (samples.jsonl is the
        SamplesCallback's)."""
        rows = strict_json(rows)
        for logger in self.loggers:
            logger.log_samples(step, rows)

    def log_image(self, name: str, path: Path, step: int | None = None) -> None:
        for logger in self.loggers:
            logger.log_image(name, path, step)

    def close(self) -> None:
        """End every logger (each one, even when another fails; the first error is raised after)."""
        loggers, self.loggers = self.loggers, []
        errors = []
        for logger in loggers:
            try:
                logger.close()
            except Exception as exc:  # noqa: BLE001 - the others must still be flushed
                errors.append(exc)
        if errors:
            raise errors[0]


def good_prefix(path: Path) -> tuple[list[dict[str, Any]], int | None]:
    """The records of a metrics.jsonl up to its first damaged line (not UTF-8, not JSON, not an object), and that
    line's number (None when every line is whole)."""
    records: list[dict[str, Any]] = []
    for number, raw in enumerate(Path(path).read_bytes().split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
        except ValueError:  # UnicodeDecodeError is a ValueError too
            return records, number
        if not isinstance(record, dict):
            return records, number
        records.append(record)
    return records, None


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl. A last line without its newline that does not parse was torn
    by a kill mid-write: it is dropped with a warning. Any other bad line is an error naming it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text (byte {exc.start}); it was damaged after the run wrote it.") from exc
    lines = text.splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            if number == len(lines) and not text.endswith("\n"):
                warnings.warn(f"{path}, line {number}: dropped a torn last record (the run was stopped while "
                              "writing it).", stacklevel=2)
                break
            raise DataError(f"{path}, line {number}: not valid JSON ({exc}); every line of metrics.jsonl must be "
                            "one JSON object. Delete or fix that line.") from exc
        if not isinstance(record, dict):
            raise DataError(f"{path}, line {number}: a JSON {type(record).__name__}, not an object; delete or fix "
                            "that line.")
        records.append(record)
    return records


def plot_curves(metrics_path: Path, output_png: Path, title: str = "") -> Path:
    """Training reward (mean and max), every eval/ metric, and a panel per retention task against iteration."""
    figure = curves_figure(read_metrics(metrics_path), title)
    import matplotlib.pyplot as plt  # after curves_figure chose the Agg backend
    # beside, then renamed over: the file is redrawn while a run trains, and a viewer must never read half of it
    partial = Path(output_png).with_name(f".{Path(output_png).name}.partial.png")
    figure.savefig(partial, dpi=110)
    plt.close(figure)
    os.replace(partial, output_png)
    return Path(output_png)


def curves_figure(records: list[dict[str, Any]], title: str = "") -> Any:
    """plot_curves's figure of these records (an open pyplot figure: close it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    eval_keys = sorted({key for record in records for key in record if key.startswith("eval/")})
    retained = sorted({key.split("/")[1] for record in records for key in record if key.startswith("retain/")})
    panels = 1 + len(eval_keys) + len(retained)
    figure, axes = plt.subplots(1, panels, figsize=(5 * panels, 3.6), squeeze=False)
    train = [r for r in records if "reward_mean" in r]
    axes[0][0].plot([r["iteration"] for r in train], [_number(r["reward_mean"]) for r in train],
                    label="population mean")
    if all("reward_max" in r for r in train):  # ES logs the population max; GRPO runs do not
        axes[0][0].plot([r["iteration"] for r in train], [_number(r["reward_max"]) for r in train],
                        label="population max")
    axes[0][0].set(xlabel="iteration", ylabel="training reward", title="train")
    axes[0][0].legend()
    for axis, key in zip(axes[0][1:], eval_keys):
        points = [(r["iteration"], _number(r[key])) for r in records if key in r]
        axis.plot(*zip(*points), marker="o")
        axis.set(xlabel="iteration", ylabel=key, title=key)
    twins = [_plot_retention(axis, records, task) for axis, task in zip(axes[0][1 + len(eval_keys):], retained)]
    if title:
        figure.suptitle(title)
    _place_panels(figure, list(zip(axes[0], [None] * (1 + len(eval_keys)) + twins)), title=bool(title))
    return figure


class CurvesRedraw:
    """curves.png kept current while a run trains. Drawing it costs about half a second of CPU (matplotlib's
    layout and rendering), more than a tiny run's whole iteration, so an evaluation redraws it only when at least
    `every_seconds` passed since the last drawing (or since this object was made, at the run's start); `draw`
    draws at once (the end of a run). A plot that fails warns and the run goes on."""

    every_seconds = 30.0

    def __init__(self, metrics_path: Path, output_png: Path, title: str = ""):
        self.metrics_path, self.output_png, self.title = Path(metrics_path), Path(output_png), title
        self._drawn_at = time.monotonic()

    def update(self) -> Path | None:
        """Redraw after an evaluation, when the last drawing is at least `every_seconds` old."""
        if time.monotonic() - self._drawn_at < self.every_seconds:
            return None
        return self.draw()

    def draw(self) -> Path | None:
        try:
            return plot_curves(self.metrics_path, self.output_png, title=self.title)
        except Exception as exc:  # noqa: BLE001 - a plot must not stop the run or hide its own error
            warnings.warn(f"could not plot {self.output_png.name}: {exc}", stacklevel=2)
            return None
        finally:
            self._drawn_at = time.monotonic()


def _place_panels(figure: Any, rows: list[Any], title: bool) -> None:
    """Margins in inches from the tick labels' lengths, instead of tight_layout: the same room for each panel's
    tick labels, axis label and right-hand KL scale at about half the CPU (tight_layout lays every tick label out
    once more before savefig draws them, most of a short run's end). `rows`: each panel's (axis, its KL scale's
    axis or None)."""

    def label_room(axis: Any) -> float:  # a vertical axis label plus its longest tick label, in inches
        labels = axis.yaxis.get_major_formatter().format_ticks(axis.get_yticks())
        return 0.45 + 0.085 * max((len(label) for label in labels), default=1)  # ~0.085 in a character at 10 pt

    width, height = figure.get_size_inches()
    left = label_room(rows[0][0])
    right = label_room(rows[-1][1]) if rows[-1][1] is not None else 0.25
    gaps = [(label_room(twin) if twin is not None else 0.0) + label_room(axis) + 0.3
            for (_, twin), (axis, _) in zip(rows, rows[1:])]
    gap = max(gaps, default=0.0)  # subplots_adjust has one spacing for all panels
    axes_width = (width - left - right - gap * (len(rows) - 1)) / len(rows)
    figure.subplots_adjust(left=left / width, right=1 - right / width, bottom=0.6 / height,
                           top=1 - (0.65 if title else 0.35) / height, wspace=gap / axes_width)


def _plot_retention(axis: Any, records: list[dict[str, Any]], task: str) -> Any:
    """A retention task's headline metric (accuracy, else reward) and, on a second scale, its KL to the base
    (returns that scale's axis, or None)."""
    prefix = f"retain/{task}/"
    metric = prefix + ("accuracy" if any(prefix + "accuracy" in r for r in records) else "reward")
    points = [(r["iteration"], _number(r[metric])) for r in records if metric in r]
    axis.plot(*zip(*points), marker="o", color="C0")
    axis.set(xlabel="iteration", ylabel=metric.removeprefix(prefix), title=f"retained: {task}")
    kl = [(r["iteration"], _number(r[prefix + "kl"])) for r in records if prefix + "kl" in r]
    if not kl:
        return None
    twin = axis.twinx()
    twin.plot(*zip(*kl), marker="s", linestyle="--", color="C3")
    twin.set_ylabel("KL to base per token (k3)", color="C3")
    return twin


def _number(value: Any) -> float:
    """A metric for plotting: null (a NaN when it was logged) becomes a gap in the curve."""
    return float("nan") if value is None else value

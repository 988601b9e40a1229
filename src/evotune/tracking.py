"""Run logging: metrics.jsonl (the CLI contract), TensorBoard, and learning-curve plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import ConfigError


class MetricsLogger:
    """Appends one JSON object per iteration; on resume drops lines past the checkpoint.

    step_key names the record's x-axis: "iteration" for ES, "step" for `evotune sft`'s optimizer steps.
    """

    def __init__(self, output_dir: Path, report_to: list[str], resume_iteration: int | None = None,
                 step_key: str = "iteration"):
        self.path = Path(output_dir) / "metrics.jsonl"
        self.step_key = step_key
        if resume_iteration is not None and self.path.exists():
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and json.loads(line)[step_key] <= resume_iteration]
            self.path.write_text("".join(line + "\n" for line in kept))
        elif resume_iteration is None:
            self.path.write_text("")
        self.writer = None
        if "tensorboard" in report_to:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:
                raise ConfigError("`report_to` includes tensorboard but the `tensorboard` package is missing; "
                                  "pip install tensorboard, or set `report_to: []`.") from exc
            self.writer = SummaryWriter(str(Path(output_dir) / "tensorboard"),
                                        purge_step=None if resume_iteration is None else resume_iteration + 1)

    def log(self, record: dict[str, Any]) -> None:
        with self.path.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        if self.writer is not None:
            for key, value in record.items():
                if key != self.step_key and isinstance(value, (int, float)):
                    self.writer.add_scalar(key, value, record[self.step_key])
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def plot_curves(metrics_path: Path, output_png: Path, title: str = "") -> Path:
    """Training reward (mean and max) and every eval/ metric against iteration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(metrics_path)
    eval_keys = sorted({key for record in records for key in record if key.startswith("eval/")})
    figure, axes = plt.subplots(1, 1 + len(eval_keys), figsize=(5 * (1 + len(eval_keys)), 3.6), squeeze=False)
    train = [r for r in records if "reward_mean" in r]
    axes[0][0].plot([r["iteration"] for r in train], [r["reward_mean"] for r in train], label="population mean")
    if all("reward_max" in r for r in train):  # ES logs the population max; GRPO runs do not
        axes[0][0].plot([r["iteration"] for r in train], [r["reward_max"] for r in train], label="population max")
    axes[0][0].set(xlabel="iteration", ylabel="training reward", title="train")
    axes[0][0].legend()
    for axis, key in zip(axes[0][1:], eval_keys):
        points = [(r["iteration"], r[key]) for r in records if key in r]
        axis.plot(*zip(*points), marker="o")
        axis.set(xlabel="iteration", ylabel=key, title=key)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(output_png, dpi=110)
    plt.close(figure)
    return Path(output_png)

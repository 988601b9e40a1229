"""The outputs of `evotune compare` (compare.py): its markdown tables and its learning-curve plots."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def plot_curves(runs: list[dict], axis_key: str, path: Path, label: str) -> None:
    """Every run's curve, a color per method; when a method has several seeds, also a panel per method with
    only its seeds (run-to-run stability at a glance), on the same y scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(dict.fromkeys(run["method"] for run in runs))
    per_method = len(runs) > len(methods)  # some method has several seeds
    panels = [None, *methods] if per_method else [None]
    figure, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4), sharey=True, squeeze=False)
    for axis, method in zip(axes[0], panels):
        for run in runs:
            if method is not None and run["method"] != method:
                continue
            color = f"C{methods.index(run['method'])}"
            xs = [point[axis_key] for point in run["curve"]]
            axis.plot(xs, [point["value"] for point in run["curve"]], marker="o", color=color, alpha=0.8,
                      label=f"{run['method']} (seed {run['seed']})")
        title = f"{runs[0]['metric']} vs {label}" + (f": {method}" if method else "")
        axis.set(xlabel=label, ylabel=f"held-out {runs[0]['metric']}", title=title)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _cell(value: Any) -> str:
    """A table cell: floats to 4 significant digits, lists of them to 3 decimals, no value as "-"."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):  # seeds are whole numbers, metric readings are not
        return "[" + ", ".join("-" if v is None else str(v) if isinstance(v, (int, str)) else _reading(v)
                               for v in value) + "]"
    return str(value)


def _reading(value: float) -> str:
    """A metric reading: 3 decimals (accuracies, rewards), or 3 significant digits below 0.01 (a KL of 0.0018 is
    not 0.000)."""
    return f"{value:.3f}" if value == 0 or abs(value) >= 0.01 else f"{value:.3g}"


def format_markdown(rows: list[dict], metric: str, notes: Sequence[str] = (), retention: Sequence[dict] = ()) -> str:
    keys = [key for key in dict.fromkeys(key for row in rows for key in row) if key != "method"]
    lines = [f"| method | {' | '.join(keys)} |", "|---" * (len(keys) + 1) + "|"]
    for row in rows:
        lines.append(f"| {row['method']} | {' | '.join(_cell(row.get(key)) for key in keys)} |")
    text = (f"{metric}; at_N_samples = mean of each seed's last evaluation within N sampled completions; final = "
            "last held-out evaluation; - = no value\n\n" + "\n".join(lines))
    if retention:
        text += "\n\n" + format_retention(retention)
    return text + ("\n\nNotes:\n" + "\n".join(f"- {note}" for note in notes) if notes else "")


def format_retention(rows: Sequence[dict]) -> str:
    """One line per method and retention metric: the final value's mean, each seed's value and their std."""
    lines = ["Retention (retention_tasks) at the last evaluation; kl = per-token KL to the base model", "",
             "| method | metric | final | per seed | std |", "|---|---|---|---|---|"]
    for row in rows:
        for key in (key for key in row if key.startswith("retain/") and not key.endswith(("_per_seed", "_std"))):
            lines.append(f"| {row['method']} | {key.removeprefix('retain/')} | {_cell(row[key])} | "
                         f"{_cell(row.get(key + '_per_seed'))} | {_cell(row.get(key + '_std'))} |")
    return "\n".join(lines)

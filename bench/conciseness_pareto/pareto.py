"""Reward against KL to the base model, one point per trained run (Qiu et al.'s Pareto view), from the
JSON that bench/learning/eval_tasks.py writes with --kl-reference; correctness in a second panel.

    python -m bench.conciseness_pareto.pareto bench/results/conciseness_pareto/eval_conciseness_pareto_seed*.json \\
        --output bench/results/conciseness_pareto

Runs are grouped by method and setting from their directory names (`.../es/learning_rate=0.004,sigma=0.002/seed0`),
the mean over seeds is drawn large, each seed small. Writes OUTPUT.png and OUTPUT.md.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def group_of(model: str) -> tuple[str, str]:
    """(method, setting) of a run directory `.../<method>/<setting>/seed<N>`; the base model is its own group."""
    parts = Path(model).parts
    if len(parts) >= 3 and parts[-1].startswith("seed"):
        return parts[-3], parts[-2]
    return "base", model


def table(groups: dict[tuple[str, str], list[dict]], metrics: list[str]) -> str:
    header = ["method", "setting", "runs", *(f"{m} (mean; per seed)" for m in metrics)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (method, setting), rows in groups.items():
        cells = [method, setting, str(len(rows))]
        for metric in metrics:
            values = [row[metric] for row in rows]
            cells.append(f"{sum(values) / len(values):.4g}; " + " / ".join(f"{v:.4g}" for v in values))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("results", nargs="+", help="JSON files of bench/learning/eval_tasks.py, e.g. one per seed")
    parser.add_argument("--output", required=True, help="path without extension for the .png and .md")
    args = parser.parse_args()
    # one file per seed's held-out set: the base model is a row of each, so its mean is over the same sets
    results = [row for path in args.results for row in json.loads(Path(path).read_text())["results"]]
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in results:
        groups[group_of(row["model"])].append(row)
    metrics = [m for m in ("reward", "kl_per_token", "contains_solution", "exact", "length") if m in results[0]]

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [m for m in ("reward", "contains_solution") if m in metrics]
    figure, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.5), squeeze=False)
    colors = {"es": "C0", "grpo": "C3", "base": "black"}
    for axis, metric in zip(axes[0], panels):
        for index, ((method, setting), rows) in enumerate(groups.items()):
            color = colors.get(method, f"C{index % 10}")
            kls, values = [r["kl_per_token"] for r in rows], [r[metric] for r in rows]
            axis.scatter(kls, values, color=color, s=12, alpha=0.5)
            axis.scatter(sum(kls) / len(kls), sum(values) / len(values), color=color, s=50, zorder=3,
                         marker="o" if method == "es" else "s" if method == "grpo" else "*")
            axis.annotate(setting if method != "base" else "base", (sum(kls) / len(kls), sum(values) / len(values)),
                          fontsize=6, xytext=(3, 3), textcoords="offset points")
        axis.set(xlabel="KL(model || base) per token (k3)", ylabel=f"held-out {metric}")
        axis.grid(alpha=0.3)
    axes[0][0].set_title("ES (circles) vs GRPO (squares); large: mean over seeds")
    figure.tight_layout()
    figure.savefig(f"{args.output}.png", dpi=110)
    Path(f"{args.output}.md").write_text(f"From {', '.join(args.results)}\n\n" + table(groups, metrics))
    print(Path(f"{args.output}.md").read_text())


if __name__ == "__main__":
    main()

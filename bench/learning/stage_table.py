"""Held-out accuracy per stage and seed, with Wilson 95% intervals: base, after the warm start (SFT), and
each method continued from it, at its last evaluation within a training-time budget and at its end.

    python -m bench.learning.stage_table --runs runs/essa_vs_grpo --methods essa grpo --budget-time 600 \
        --name stages_essa_vs_grpo_arithmetic
(run directories RUNS/sft-seedS and RUNS/METHOD-seedS, as bench/essa/essa_vs_grpo.sh and
bench/countdown_small/countdown_small.sh write)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.common import write_result
from evotune.evaluation.statistics import wilson_interval  # noqa: E402
from evotune.tracking.tracker import read_metrics  # noqa: E402


def evaluations(run: Path, metric: str) -> list[tuple[float, float]]:
    """(cumulative training seconds, value) at every evaluation of a run."""
    elapsed, points = 0.0, []
    for record in read_metrics(run / "metrics.jsonl"):
        elapsed += record.get("time_s") or 0.0
        if record.get(metric) is not None:
            points.append((round(elapsed, 1), record[metric]))
    return points


def cell(value: float, count: int) -> dict:
    low, high = wilson_interval(value * count, count)
    return {"value": round(value, 4), "ci95": [round(low, 4), round(high, 4)]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", required=True)
    parser.add_argument("--methods", nargs="+", required=True)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--budget-time", type=float, required=True)
    parser.add_argument("--metric", default="eval/accuracy")
    parser.add_argument("--num-eval", type=int, required=True, help="held-out prompts behind each value")
    parser.add_argument("--name", required=True)
    parser.add_argument("--study", default="learning",
                        help="the study whose results folder, bench/results/STUDY/, gets the file")
    args = parser.parse_args()
    runs, n = Path(args.runs), args.num_eval
    rows = []
    for seed in args.seeds:
        sft = evaluations(runs / f"sft-seed{seed}", args.metric)
        row = {"seed": seed, "base": cell(sft[0][1], n), "sft": cell(sft[-1][1], n)}
        for method in args.methods:
            if not (runs / f"{method}-seed{seed}" / "metrics.jsonl").exists():
                row[method] = None  # not run
                continue
            points = evaluations(runs / f"{method}-seed{seed}", args.metric)
            within = [value for seconds, value in points if seconds <= args.budget_time]
            row[method] = {"at_budget": cell(within[-1], n), "final": cell(points[-1][1], n),
                           "final_train_s": points[-1][0], "curve": points}
        rows.append(row)
    lines = ["| seed | base | after SFT | " + " | ".join(f"{m} at {args.budget_time:g} s | {m} final (s)"
                                                          for m in args.methods) + " |",
             "|---" * (3 + 2 * len(args.methods)) + "|"]
    for row in rows:
        def show(c):
            return f"{c['value']:.3f} [{c['ci95'][0]:.3f}, {c['ci95'][1]:.3f}]"
        lines.append(f"| {row['seed']} | {show(row['base'])} | {show(row['sft'])} | " + " | ".join(
            f"{show(row[m]['at_budget'])} | {show(row[m]['final'])} ({row[m]['final_train_s']:g})" if row[m] else
            "not run | not run" for m in args.methods) + " |")
    write_result(args.name, {"command": "python -m bench.learning.stage_table " + " ".join(sys.argv[1:]),
                             "metric": args.metric, "num_eval": n, "budget_time_s": args.budget_time, "rows": rows,
                             "table": lines}, study=args.study)
    print("\n".join(lines))


if __name__ == "__main__":
    main()

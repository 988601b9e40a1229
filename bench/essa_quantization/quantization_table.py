"""The precision table of bench/essa_quantization/essa_quantization.sh: per base precision (float32, INT8, INT4) and
seed, held-out accuracy of the SFT adapter alone on that base and of ESSA from it (start and end), with Wilson 95%
intervals, the run's peak RSS and its median seconds per ESSA iteration; plus the token-budget check (the SFT adapter on
each base at growing max_new_tokens) and the mean over seeds.

    python -m bench.essa_quantization.quantization_table --runs runs/essa_quantization --seeds 0 1 --num-eval 512 \
        --max-new-tokens 10 --token-check 6 32 --name essa_quantization
(run directories RUNS/sft-seedS, with eval-PRECISION.json and eval-PRECISION-tokensT.json, and
RUNS/essa-PRECISION-seedS, as bench/essa_quantization/essa_quantization.sh writes them)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from bench.common import write_result
from evotune.evaluation.statistics import wilson_interval  # noqa: E402
from evotune.tracking.tracker import read_metrics  # noqa: E402

PRECISIONS = ("float32", "int8", "int4")


def cell(value: float, count: int) -> dict:
    low, high = wilson_interval(value * count, count)
    return {"value": round(value, 4), "ci95": [round(low, 4), round(high, 4)]}


def eval_accuracy(path: Path) -> float | None:
    return json.loads(path.read_text())[0]["accuracy"] if path.exists() else None


def essa_row(run: Path, count: int) -> dict | None:
    """ESSA's accuracy at iteration 0 (the SFT adapter rebuilt from its SVD) and at its end, peak RSS, s/iteration."""
    if not (run / "metrics.jsonl").exists():
        return None
    records = read_metrics(run / "metrics.jsonl")
    evaluations = [record for record in records if record.get("eval/accuracy") is not None]
    iterations = [record for record in records if record.get("time_s") is not None and record.get("iteration")]
    return {"start": cell(evaluations[0]["eval/accuracy"], count) if evaluations else None,
            "end": cell(evaluations[-1]["eval/accuracy"], count) if len(evaluations) > 1 else None,
            "iterations": max((record["iteration"] for record in iterations), default=0),
            "finished": (run / "final" / "adapter_config.json").exists(),
            "seconds_per_iteration": (round(statistics.median(r["time_s"] for r in iterations), 1)
                                      if iterations else None),
            "peak_rss_mib": max((r["peak_rss_mib"] for r in records if r.get("peak_rss_mib")), default=None)}


def show(value: dict | None) -> str:
    return f"{value['value']:.3f} [{value['ci95'][0]:.3f}, {value['ci95'][1]:.3f}]" if value else "-"


def table(rows: list[dict]) -> list[str]:
    lines = ["| base | seed | SFT adapter alone | ESSA start | ESSA end | ESSA gain | peak RSS (MiB) | s / iteration |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        essa = row["essa"] or {}
        gain = (f"{essa['end']['value'] - row['sft_alone']['value']:+.3f}" if essa.get("end") and row["sft_alone"]
                else "-")
        lines.append(f"| {row['precision']} | {row['seed']} | {show(row['sft_alone'])} | {show(essa.get('start'))} | "
                     f"{show(essa.get('end'))} | {gain} | {essa.get('peak_rss_mib', '-')} | "
                     f"{essa.get('seconds_per_iteration', '-')} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", required=True)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--num-eval", type=int, required=True, help="held-out prompts behind each value")
    parser.add_argument("--max-new-tokens", type=int, required=True)
    parser.add_argument("--token-check", nargs="*", type=int, default=[])
    parser.add_argument("--name", required=True)
    args = parser.parse_args()
    runs, n = Path(args.runs), args.num_eval
    rows, token_check = [], {}
    for seed in args.seeds:
        sft = runs / f"sft-seed{seed}"
        for precision in PRECISIONS:
            alone = eval_accuracy(sft / f"eval-{precision}.json")
            token_check[f"{precision}-seed{seed}"] = {
                args.max_new_tokens: alone, **{tokens: eval_accuracy(sft / f"eval-{precision}-tokens{tokens}.json")
                                               for tokens in args.token_check}}
            rows.append({"precision": precision, "seed": seed,
                         "sft_alone": cell(alone, n) if alone is not None else None,
                         "essa": essa_row(runs / f"essa-{precision}-seed{seed}", n)})
    means = {}
    for precision in PRECISIONS:
        mine = [row for row in rows if row["precision"] == precision and row["essa"] and row["essa"]["end"]]
        if mine:
            means[precision] = {key: round(statistics.mean(value(row) for row in mine), 4) for key, value in (
                ("sft_alone", lambda row: row["sft_alone"]["value"]),
                ("essa_end", lambda row: row["essa"]["end"]["value"]),
                ("peak_rss_mib", lambda row: row["essa"]["peak_rss_mib"]),
                ("seconds_per_iteration", lambda row: row["essa"]["seconds_per_iteration"]))}
    lines = table(rows)
    write_result(args.name, {"command": "python -m bench.essa_quantization.quantization_table "
                                        + " ".join(sys.argv[1:]),
                             "num_eval": n, "max_new_tokens": args.max_new_tokens,
                             "token_check_sft_accuracy": token_check, "rows": rows, "mean_over_seeds": means,
                             "table": lines}, study="essa_quantization")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

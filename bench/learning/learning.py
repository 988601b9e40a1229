"""Learning on a real model: held-out metrics before vs after ES, several seeds, one plot.

Each seed is a normal `evotune train` run (run directory under runs/bench/); this script
collects their metrics.jsonl into one JSON summary and one PNG.

    python -m bench.learning.learning --config bench/configs/arithmetic_10tok.yaml --seeds 0 1
    python -m bench.learning.learning --config examples/conciseness.yaml --seeds 0 1 --metric eval/reward
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench.common import study_results, write_result


def read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--metric", default="eval/accuracy")
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--runs", default="runs/bench")
    parser.add_argument("--name", default=None)
    parser.add_argument("--study", default="learning",
                        help="the study whose results folder, bench/results/STUDY/, gets the file")
    args = parser.parse_args()
    name = args.name or Path(args.config).stem
    summary = {"command": "python -m bench.learning.learning " + " ".join(sys.argv[1:]), "config": args.config,
               "metric": args.metric, "runs": []}
    curves = {}
    for seed in args.seeds:
        output = Path(args.runs) / f"{name}-seed{seed}"
        command = ["evotune", "train", args.config, "--output-dir", str(output), "--set", f"seed={seed}"]
        for override in args.set:
            command += ["--set", override]
        resume = (output / "checkpoint" / "state.json").exists()
        started = time.perf_counter()
        subprocess.run(command + (["--resume"] if resume else []), check=True)
        wall = time.perf_counter() - started
        records = read(output / "metrics.jsonl")
        points = [(r["iteration"], r[args.metric]) for r in records if args.metric in r]
        curves[seed] = points
        summary["runs"].append({"seed": seed, "output_dir": str(output), "command": " ".join(command),
                                "wall_time_s": round(wall, 1), "before": points[0][1], "after": points[-1][1],
                                "curve": points,
                                "iteration_time_s_mean": round(sum(r["time_s"] for r in records if "time_s" in r)
                                                               / max(1, sum("time_s" in r for r in records)), 2)})
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 4))
    for seed, points in curves.items():
        axis.plot(*zip(*points), marker="o", label=f"seed {seed}")
    axis.set(xlabel="ES iteration", ylabel=f"held-out {args.metric}", title=name)
    axis.legend()
    figure.tight_layout()
    figure.savefig(study_results(args.study) / f"learning_{name}.png", dpi=110)
    write_result(f"learning_{name}", summary, study=args.study)


if __name__ == "__main__":
    main()

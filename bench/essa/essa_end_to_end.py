"""ESSA end to end on a real model: base -> LoRA SFT -> CMA-ES on the SVD singular values.

For each seed: `evotune sft` (stage 1), then `evotune train` with `space: svd_lora,
strategy: cma` starting from that adapter (stages 2-3). The ES run's iteration-0 evaluation
is the SFT model (zero offsets reproduce the adapter), so one curve shows SFT -> ESSA; the
base model is scored on the same held-out prompts. Writes bench/results/essa_<name>.{json,png}.

    python -m bench.essa.essa_end_to_end --sft-config examples/sft_arithmetic.yaml \
        --train-config examples/essa_arithmetic.yaml --seeds 0 1
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


def timed(command: list[str]) -> float:
    print("+", " ".join(command), file=sys.stderr, flush=True)
    started = time.perf_counter()
    subprocess.run(command, check=True)
    return round(time.perf_counter() - started, 1)


def run_seed(args: argparse.Namespace, seed: int) -> dict:
    from evotune.config import load_config

    root = Path(args.runs) / f"seed{seed}"
    sft_dir, essa_dir = root / "sft", root / "essa"
    sft = ["evotune", "sft", args.sft_config, "--output-dir", str(sft_dir), "--set", f"seed={seed}"]
    sft_time = 0.0 if (sft_dir / "adapter" / "adapter_config.json").exists() else timed(sft)
    train = ["evotune", "train", args.train_config, "--output-dir", str(essa_dir), "--set", f"seed={seed}",
             "--set", f"adapter={sft_dir / 'adapter'}"] + [x for pair in args.set for x in ("--set", pair)]
    resume = (essa_dir / "checkpoint" / "state.json").exists()
    train_time = timed(train + (["--resume"] if resume else []))
    config = load_config(essa_dir / "config.yaml")
    base_json = root / "base_eval.json"
    base_time = timed(["evotune", "eval", "--model", config.model, "--task", config.task, "--seed", str(seed),
                       "--num-eval", str(config.num_eval), "--max-new-tokens", str(config.max_new_tokens),
                       "--dtype", config.dtype, "--output", str(base_json)])
    records = read(essa_dir / "metrics.jsonl")
    points = [(r["iteration"], r[args.metric]) for r in records if args.metric in r]
    base = json.loads(base_json.read_text())[0][args.metric.removeprefix("eval/")]
    times = [r["time_s"] for r in records if "time_s" in r]
    return {"seed": seed, "commands": {"sft": " ".join(sft), "train": " ".join(train)},
            "wall_time_s": {"sft": sft_time, "essa": train_time, "base_eval": base_time},
            "iteration_time_s_mean": round(sum(times) / max(1, len(times)), 2),
            "base": base, "sft": points[0][1], "essa": points[-1][1], "curve": points}


def plot(name: str, runs: list[dict], metric: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6.5, 4))
    for index, run in enumerate(runs):
        color = f"C{index}"
        axis.plot(*zip(*run["curve"]), marker="o", color=color, label=f"seed {run['seed']}: SFT -> ESSA")
        axis.axhline(run["base"], color=color, linestyle=":", label=f"seed {run['seed']}: base model")
    axis.set(xlabel="CMA-ES iteration (0 = after LoRA SFT)", ylabel=f"held-out {metric}", title=f"ESSA on {name}")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(study_results("essa") / f"essa_{name}.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sft-config", required=True)
    parser.add_argument("--train-config", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--metric", default="eval/accuracy")
    parser.add_argument("--set", action="append", default=[], help="override for the ES stage")
    parser.add_argument("--runs", default="runs/essa")
    parser.add_argument("--name", default="arithmetic")
    args = parser.parse_args()
    runs = [run_seed(args, seed) for seed in args.seeds]
    plot(args.name, runs, args.metric)
    write_result(f"essa_{args.name}", {"command": "python -m bench.essa.essa_end_to_end " + " ".join(sys.argv[1:]),
                                       "metric": args.metric, "runs": runs}, study="essa")


if __name__ == "__main__":
    main()

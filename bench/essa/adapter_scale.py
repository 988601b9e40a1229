"""Is an SFT adapter simply under-scaled? Scale every singular value of every LoRA factor by c (the
adapter by c^2: the all-ones direction of `svd_offsets: relative`) and measure greedy accuracy on the
task's *training* questions (no held-out question is used). A gain at c > 1 would be a direction ESSA's
search could find cheaply; none means the SFT adapter already sits at its best overall scale.

    python -m bench.essa.adapter_scale --adapter runs/essa_vs_grpo/sft-seed0/adapter --seed 0
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from bench.common import write_result
from evotune.builders import build_space, build_task, load_backend  # noqa: E402
from evotune.config import TrainConfig  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--adapter", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-prompts", type=int, default=256)
    parser.add_argument("--scales", type=float, nargs="+", default=[1.0, 1.1, 1.25, 1.5, 1.75])
    parser.add_argument("--name", default="adapter_scale_arithmetic")
    args = parser.parse_args()
    config = TrainConfig(task="arithmetic", space="svd_lora", strategy="cma", adapter=args.adapter,
                         svd_offsets="relative", dtype="float32", report_to=[], seed=args.seed,
                         max_new_tokens=10)
    task = build_task(config)
    backend = load_backend(config, "cpu")
    space = build_space(config, backend)
    rows = task.train_rows[:args.num_prompts]
    prompts = [row["prompt"] for row in rows]
    started, points = time.perf_counter(), []
    for scale in args.scales:
        space.apply(np.full(space.mean.numel(), scale - 1.0))  # S * (1 + x) = S * scale
        completions = backend.generate(prompts, config.max_new_tokens)
        space.restore()
        accuracy = float(np.mean(task.rewards(rows, completions)))
        points.append({"singular_value_scale": scale, "adapter_scale": scale * scale, "train_accuracy": accuracy})
        print(points[-1], flush=True)
    write_result(f"{args.name}_seed{args.seed}", {
        "command": "python -m bench.essa.adapter_scale " + " ".join(sys.argv[1:]), "adapter": args.adapter,
        "num_prompts": len(rows), "max_new_tokens": config.max_new_tokens, "dimension": int(space.mean.numel()),
        "wall_time_s": round(time.perf_counter() - started, 1), "points": points}, study="essa")


if __name__ == "__main__":
    main()

"""Peak memory and step time of `evotune grpo` with the step's completions in one batch vs in micro-batches
(`gradient_accumulation_steps`), one fresh process per setting, run one after another on the same machine.

The update is the same (tests/test_grpo.py checks it); what changes is how many completions the loss and its
backward see at once, so the logits and activations held for the backward shrink by that factor.

    OMP_NUM_THREADS=1 python -m bench.speed.grpo_memory --steps 3 --accumulation 1 4
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import write_result
from evotune.tracking.tracker import read_metrics  # noqa: E402


def run(config: str, steps: int, accumulation: int, directory: Path) -> dict:
    output = directory / f"accumulation{accumulation}"
    command = ["evotune", "grpo", config, "--output-dir", str(output), "--set", f"iterations={steps}",
               "--set", f"gradient_accumulation_steps={accumulation}", "--set", "eval_every=0",
               "--set", "checkpoint_every=1000", "--set", "num_eval=8", "--set", "report_to=[]"]
    subprocess.run(command, check=True)
    records = read_metrics(output / "metrics.jsonl")
    steps_logged = [r for r in records if "reward_mean" in r]
    times = [r["time_s"] for r in steps_logged]  # each step's own wall time
    return {"gradient_accumulation_steps": accumulation, "command": " ".join(command),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in records if "peak_rss_mib" in r),
            "step_time_s": sorted(times)[len(times) // 2] if times else None}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="examples/grpo_conciseness.yaml")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--accumulation", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        rows = [run(args.config, args.steps, accumulation, Path(directory)) for accumulation in args.accumulation]
    first = rows[0]["peak_rss_mib"]
    for row in rows:
        row["peak_rss_ratio_to_first"] = round(row["peak_rss_mib"] / first, 3)
    payload = {"command": "python -m bench.speed.grpo_memory " + " ".join(sys.argv[1:]), "config": args.config,
               "steps": args.steps, "runs": rows}
    path = write_result(f"grpo_memory_{Path(args.config).stem}", payload, study="speed")
    print(json.dumps(payload, indent=1), f"\nwrote {path}")


if __name__ == "__main__":
    main()

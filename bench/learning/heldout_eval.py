"""A larger held-out evaluation of finished runs against their base model.

The in-training eval uses num_eval prompts (128 for arithmetic), whose binomial noise is several
points. This script draws a larger fresh set from the same task with another seed, drops every
prompt that occurs anywhere in a run's training rows, and scores the base model and each run's
final/ model on the rest, greedy, with 95% Wilson intervals and a paired sign count (prompts
only the trained model gets right vs only the base gets right).

    python -m bench.learning.heldout_eval runs/bench/arithmetic-seed0 runs/bench/arithmetic-seed1 --num-eval 1000
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from bench.common import write_result
from evotune.backends import HFBackend  # noqa: E402
from evotune.builders import build_task  # noqa: E402
from evotune.config import load_config  # noqa: E402
from evotune.evaluation.generation import generate_in_chunks  # noqa: E402
from evotune.tasks import get_task  # noqa: E402


def wilson(successes: float, total: int, z: float = 1.96) -> tuple[float, float]:
    p = successes / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return round(centre - half, 4), round(centre + half, 4)


def score(model: str, dtype: str, task, rows: list[dict], max_new_tokens: int) -> list[float]:
    completions = generate_in_chunks(HFBackend.load(model, dtype), rows, max_new_tokens)
    return [float(x) for x in task.metric_values("accuracy", rows, completions)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--num-eval", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=20261122)
    parser.add_argument("--study", default="learning",
                        help="the study whose results folder, bench/results/STUDY/, gets the file")
    args = parser.parse_args()
    configs = [load_config(Path(run) / "config.yaml") for run in args.runs]
    base = configs[0]
    task = get_task(base.task, seed=args.seed, num_eval=args.num_eval, **base.task_args)
    seen = set()
    for config in configs:  # every prompt any run could have trained on
        seen |= {json.dumps(r["prompt"]) for r in build_task(config).train_rows}
    rows = [r for r in task.eval_rows if json.dumps(r["prompt"]) not in seen]
    started = time.perf_counter()
    base_scores = score(base.model, base.dtype, task, rows, base.max_new_tokens)
    results = {"command": "python -m bench.learning.heldout_eval " + " ".join(sys.argv[1:]), "task": base.task,
               "num_prompts": len(rows), "dropped_as_seen_in_training": args.num_eval - len(rows),
               "base": {"model": base.model, "accuracy": round(sum(base_scores) / len(rows), 4),
                        "ci95": wilson(sum(base_scores), len(rows))}, "runs": []}
    for run, config in zip(args.runs, configs):
        trained = score(str(Path(run) / "final"), config.dtype, task, rows, config.max_new_tokens)
        results["runs"].append({
            "run": run, "seed": config.seed, "accuracy": round(sum(trained) / len(rows), 4),
            "ci95": wilson(sum(trained), len(rows)),
            "only_trained_correct": sum(t > b for t, b in zip(trained, base_scores)),
            "only_base_correct": sum(b > t for t, b in zip(trained, base_scores))})
    results["wall_time_s"] = round(time.perf_counter() - started, 1)
    write_result(f"heldout_{base.task}", results, study=args.study)


if __name__ == "__main__":
    main()

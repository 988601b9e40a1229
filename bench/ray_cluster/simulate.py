"""The coordinator at 10, 100 and 1,000 workers, simulated: the driver's real loop (OpenES ask, the unit evaluator's
scheduling, tell, sync) over evotune.distributed.simulated's virtual-clock pool, where each unit takes a modeled
generation time instead of running a model. Measures the driver's own CPU time per iteration, the bytes it sends
and receives, and the share of a 60 s iteration that CPU time is (a bound on what the workers can lose to it).

    python -m bench.ray_cluster.simulate --workers 10 100 1000 --iterations 5

If bench/results/ray_cluster/ray_call_cost.json exists (bench/ray_cluster/ray_call_cost.py, measured on a real Ray
cluster),
each row also estimates the share with Ray's per-call driver cost added for every message (the simulation has none).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import numpy as np

from bench.common import study_results, write_result
from evotune.distributed.simulated import SimulatedEvaluator  # noqa: E402
from evotune.distributed.units import auto_shards  # noqa: E402
from evotune.strategies import OpenES  # noqa: E402


def simulate(workers: int, population: int, prompts: int, iteration_seconds: float, iterations: int,
             slow_share: float, jitter: float) -> dict:
    """One arm: `iterations` of the driver loop; per-iteration driver CPU seconds, bytes, messages, virtual time."""
    shards = auto_shards(workers, population, prompts)
    units = population * shards
    rounds = math.ceil(units / workers)  # units each worker runs in an iteration, at most
    slow = {worker: 4.0 for worker in range(max(1, int(slow_share * workers)))}  # a few workers run 4x slower
    pool = SimulatedEvaluator(workers, unit_seconds=iteration_seconds / rounds, prompts_per_unit=prompts / shards,
                              straggler_factor=3.0, jitter=jitter, slowdown=slow, seed=workers)
    strategy = OpenES(population_size=population, sigma=1e-3, antithetic=True, seed=0)
    cpu, sent, calls, wall = [], [], [], []
    for iteration in range(iterations):
        indices = [int(i) for i in np.random.default_rng(iteration).choice(10_000, size=prompts, replace=False)]
        bytes_before, calls_before, clock_before = pool.bytes_sent, pool.calls, pool.now()
        modeled_before = pool.worker_cpu_seconds
        started = time.process_time()
        candidates = strategy.ask()
        rewards = pool.evaluate(candidates, [], row_indices=indices)
        update, _ = strategy.tell(rewards)
        pool.sync(update)
        cpu.append(time.process_time() - started - (pool.worker_cpu_seconds - modeled_before))
        sent.append(pool.bytes_sent - bytes_before)
        calls.append(pool.calls - calls_before)
        wall.append(pool.now() - clock_before)
    cpu_s = float(np.median(cpu[1:] if len(cpu) > 1 else cpu))  # the first iteration warms caches
    return {"workers": workers, "population": population, "prompts": prompts, "shards": shards,
            "units_per_iteration": units, "slow_workers": len(slow), "units_resent": pool.resent,
            "driver_cpu_s_per_iteration": cpu_s, "driver_cpu_s_each": [round(value, 5) for value in cpu],
            "bytes_per_iteration": int(np.median(sent)), "messages_per_iteration": int(np.median(calls)),
            "virtual_iteration_s": [round(value, 2) for value in wall],
            "share_of_iteration": cpu_s / iteration_seconds}


def with_ray_cost(row: dict, iteration_seconds: float) -> dict:
    """Add Ray's measured per-message driver CPU (a unit's submit + its result, one apply_update per worker)."""
    path = study_results("ray_cluster") / "ray_call_cost.json"
    if not path.exists():
        return row
    cost = json.loads(path.read_text())["driver_cpu_s_per_call"]
    estimate = row["driver_cpu_s_per_iteration"] + cost * row["messages_per_iteration"]
    return {**row, "ray_driver_cpu_s_per_call": cost, "estimated_driver_cpu_s_with_ray": estimate,
            "estimated_share_with_ray": estimate / iteration_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--population", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--iteration-seconds", type=float, default=60.0)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--slow-share", type=float, default=0.01, help="share of workers 4x slower (stragglers)")
    parser.add_argument("--jitter", type=float, default=0.1, help="lognormal sigma of each unit's modeled time")
    parser.add_argument("--name", default="ray_coordinator_simulated")
    args = parser.parse_args()
    rows = [with_ray_cost(simulate(workers, args.population, args.prompts, args.iteration_seconds, args.iterations,
                                   args.slow_share, args.jitter), args.iteration_seconds)
            for workers in args.workers]
    write_result(args.name, {"command": "python -m bench.ray_cluster.simulate " + " ".join(sys.argv[1:]),
                             "iteration_seconds": args.iteration_seconds, "rows": rows,
                             "leaves_out": "Ray's own per-call cost (estimated separately from ray_call_cost.json), "
                                           "network latency and bandwidth, real generation variance beyond the "
                                           "modeled jitter, worker failures"}, study="ray_cluster")
    print(table(rows))


def table(rows: list[dict]) -> str:
    lines = ["| workers | population x shards = units | driver CPU ms / iteration | share of 60 s | bytes / iteration "
             "| messages | with Ray's per-call cost: share |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        ray = f"{100 * row['estimated_share_with_ray']:.3f}%" if "estimated_share_with_ray" in row else "n/a"
        lines.append(f"| {row['workers']} | {row['population']} x {row['shards']} = {row['units_per_iteration']} | "
                     f"{1000 * row['driver_cpu_s_per_iteration']:.1f} | {100 * row['share_of_iteration']:.3f}% | "
                     f"{row['bytes_per_iteration']:,} | {row['messages_per_iteration']} | {ray} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

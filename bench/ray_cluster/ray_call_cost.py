"""Ray's own cost on the driver per message, measured with the real RayEvaluator on a real 3-node Ray cluster on
this machine (ray.cluster_utils.Cluster: a head and 2 worker nodes, 1 CPU each), with replica stubs that load no
model and answer at once, so the driver is the bottleneck and its CPU time is all coordination:

    python -m bench.ray_cluster.ray_call_cost --iterations 5

Writes bench/results/ray_cluster/ray_call_cost.json: the driver's CPU seconds per message (a unit sent, a result
received, an
update sent to one actor), which simulate.py adds to the simulated loop (that has no Ray in it).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from bench.common import write_result
from evotune.distributed.base import Replica  # noqa: E402
from evotune.strategies import OpenES  # noqa: E402


class StubSpace:
    """Applies nothing: the unit's cost is Ray's and the driver's, not a model's."""

    def apply(self, member) -> None:
        pass

    def apply_update(self, update) -> None:
        pass

    def replay(self, log) -> None:
        pass

    def checksum(self) -> str:
        return "stub"

    def noise_fingerprint(self) -> str:
        return "stub"


class StubBackend:
    def generate(self, prompts, max_new_tokens) -> list[str]:
        return [""] * len(prompts)


class StubTask:
    train_rows = [{"prompt": ""}] * 10_000

    def rewards(self, rows, completions) -> np.ndarray:
        return np.zeros(len(rows))


def stub_replica() -> Replica:
    return Replica(StubTask(), StubBackend(), StubSpace(), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--population", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--shards", type=int, default=8)
    args = parser.parse_args()
    import ray
    from ray.cluster_utils import Cluster

    from evotune.distributed.ray import RayEvaluator

    cluster = Cluster(initialize_head=True, connect=False, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        pool = RayEvaluator(stub_replica, 3, lambda: {"checkpoint": None, "log": []}, address=cluster.address,
                            checksum_every=0, shards=args.shards, straggler_factor=3.0)
        pool.start()
        strategy = OpenES(population_size=args.population, sigma=1e-3, antithetic=True, seed=0)
        cpu, wall, messages = [], [], []
        for iteration in range(args.iterations + 1):  # the first warms Ray's connections up; not counted
            indices = [int(i) for i in np.random.default_rng(iteration).choice(10_000, args.prompts, replace=False)]
            started, clock = time.process_time(), time.perf_counter()
            candidates = strategy.ask()
            rewards = pool.evaluate(candidates, [], row_indices=indices)
            update, _ = strategy.tell(rewards)
            pool.sync(update)
            if iteration:
                cpu.append(time.process_time() - started)
                wall.append(time.perf_counter() - clock)
                messages.append(2 * args.population * args.shards + pool.num_workers)
        nodes = len(set(pool.node_of().values()))
        pool.close()
    finally:
        ray.shutdown()
        cluster.shutdown()
    per_call = float(np.sum(cpu) / np.sum(messages))
    write_result("ray_call_cost", {
        "command": "python -m bench.ray_cluster.ray_call_cost " + " ".join(sys.argv[1:]),
        "cluster": "ray.cluster_utils.Cluster: head + 2 worker nodes, 1 CPU each, on this machine",
        "actors": 3, "actor_nodes": nodes, "population": args.population, "shards": args.shards,
        "messages_per_iteration": messages[0], "driver_cpu_s_each": [round(value, 4) for value in cpu],
        "wall_s_each": [round(value, 4) for value in wall], "driver_cpu_s_per_call": per_call,
        "note": "replica stubs answer at once, so every second of driver CPU here is coordination: RayEvaluator's "
                "loop plus Ray's submit, wait, get and serialization on the driver"}, study="ray_cluster")


if __name__ == "__main__":
    main()

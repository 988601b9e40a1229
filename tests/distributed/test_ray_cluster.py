"""A real multi-node Ray cluster on one machine (ray.cluster_utils.Cluster: a head and 2 worker nodes of 1 CPU each,
every node its own raylet): actors spread over the nodes, a node removed mid-iteration and one joined later change
nothing, any sharding of the prompts gives the same rewards, a deliberately slow actor's units are re-sent and change
nothing, and a killed driver resumed by `evotune train --resume` (joining the cluster from the run's record) ends on
the in-process run's weights.

One cluster for the module (it takes seconds to start); the node-removal test runs last and leaves 3 nodes behind."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import TINY_EVAL_BUDGET, assert_same, requires_ray, state, train_until_killed

from evotune.config import TrainConfig
from evotune.trainer import Trainer

pytestmark = [*requires_ray, pytest.mark.engine]  # a multi-node cluster: the engine tier


@pytest.fixture(scope="module")
def cluster():
    """Head + 2 worker nodes, 1 CPU each; this process is connected to it (as a driver on the head would be)."""
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():  # another module's local Ray: this module's driver joins the cluster instead
        ray.shutdown()
    nodes = Cluster(initialize_head=True, connect=False,
                    head_node_args={"num_cpus": 1, "include_dashboard": False, "object_store_memory": 80 * 2 ** 20})
    for _ in range(2):
        nodes.add_node(num_cpus=1, object_store_memory=80 * 2 ** 20)
    nodes.wait_for_nodes()
    ray.init(address=nodes.address, logging_level="ERROR")
    yield nodes
    ray.shutdown()
    nodes.shutdown()


def settings(model_dir: str, **overrides) -> dict:
    values = dict(model=model_dir, task="conciseness", population_size=6, antithetic=True, sigma=0.05,
                  learning_rate=0.05, optimizer="adam", iterations=2, batch_size=4, max_new_tokens=5, num_eval=2,
                  eval_every=0, checkpoint_every=1, dtype="float32", report_to=[], seed=1,
                  eval_max_new_tokens=TINY_EVAL_BUDGET)
    values.update(overrides)
    return values


def pooled(model_dir: str, directory, address: str, **overrides) -> Trainer:
    values = {"distributed": "ray", "workers": 3, "ray_address": address, "checksum_every": 1, **overrides}
    return Trainer(TrainConfig(**settings(model_dir, **values)), directory)


@pytest.fixture(scope="module")
def local_run(tiny_model_dir, tmp_path_factory):
    """The in-process run every cluster run must reproduce: its per-iteration records and final mean."""
    trainer = Trainer(TrainConfig(**settings(tiny_model_dir)), tmp_path_factory.mktemp("local"))
    records = [trainer.step() for _ in range(2)]
    return trainer, records


def test_actors_spread_over_the_nodes_any_sharding_gives_the_same_rewards_and_a_slow_actor_changes_nothing(
        cluster, tiny_model_dir, local_run, tmp_path):
    """Units of 1, 2 and 4 shards of the prompts score a population exactly as the in-process evaluator does. Then
    one actor sleeps 15 s before each unit: its unit is re-sent to a free actor after 2 median unit times, the first
    copy back wins, and both iterations end on the in-process mean before the slow actor's first unit could have
    come back (without re-sending, the first iteration alone would wait 15 s for it). One pool for both: each actor
    start costs seconds of the CI's 2 cores. The actors' means are compared with the driver's (check_replicas) in
    the node-removal test, where no actor is left sleeping on a unit."""
    local, records = local_run
    trainer = pooled(tiny_model_dir, tmp_path / "sharded", cluster.address, prompt_shards=2, straggler_factor=2.0,
                     checksum_every=0)
    evaluator = trainer.evaluator
    try:
        evaluator.start()
        assert len(set(evaluator.node_of().values())) == 3  # SPREAD: one actor per node
        indices = trainer.batch_indices(0)
        population = trainer.strategy.ask()
        rows = [trainer.task.train_rows[i] for i in indices]
        reference = _local_rewards(trainer, population, rows)
        for shards in (1, 2, 4):
            evaluator.shards = shards
            got = evaluator.evaluate(population, rows, row_indices=indices)
            assert np.array_equal(got, reference, equal_nan=True), (shards, got, reference)
        assert np.ptp(reference) > 0  # the reward tells members apart, so the update moves the weights
        evaluator.shards = 2

        def slow_down(actor):  # runs inside the actor (Ray's __ray_call__): every generate sleeps first
            import time as clock

            generate = actor.replica.backend.generate
            actor.replica.backend.generate = lambda *args, **kwargs: (clock.sleep(15.0), generate(*args, **kwargs))[1]

        import ray

        ray.get(evaluator.workers[0].__ray_call__.remote(slow_down))
        started = time.perf_counter()
        steps = [trainer.step(), trainer.step()]
        elapsed = time.perf_counter() - started
        for a, b in zip(records, steps):
            assert a["reward_mean"] == b["reward_mean"] and a["reward_max"] == b["reward_max"]
        assert_same(state(local), state(trainer))
        assert evaluator.resent >= 1 and steps[-1]["units_resent"] == evaluator.resent
        assert elapsed < 15.0, elapsed
    finally:
        evaluator.close()


def _local_rewards(trainer: Trainer, population, rows) -> np.ndarray:
    from evotune.distributed import LocalEvaluator

    return LocalEvaluator(trainer.space, trainer.backend, trainer.task, trainer.config.max_new_tokens).evaluate(
        population, rows)


@pytest.mark.slow  # CI: the spread test below runs on this cluster; a killed actor is distributed/test_ray.py's
def test_the_driver_killed_on_the_cluster_resumes_from_the_cli_to_the_in_process_weights(cluster, tiny_model_dir,
                                                                                       local_run, tmp_path,
                                                                                       monkeypatch):
    """The driver dies in iteration 2 (its actors go with it, as Ray ends a dead driver's actors); `evotune train
    --resume`, in its own process as a user runs it, joins the same cluster from the run's recorded `ray_address`,
    starts new actors from the checkpoint and writes the in-process run's final weights."""
    from safetensors.torch import load_file

    local, _ = local_run
    run = tmp_path / "run"
    trainer = pooled(tiny_model_dir, run, cluster.address, prompt_shards=2, workers=2)  # 2 actors: 4 starts, not 6
    train_until_killed(monkeypatch, trainer, at_step=2)
    trainer.evaluator.close()
    command = [sys.executable, "-c", "from evotune.cli.main import console_main; raise SystemExit(console_main())",
               "train", "--output-dir", str(run), "--resume"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    local.finish()  # writes final/ of the in-process run
    expected = load_file(str(local.output_dir / "final" / "model.safetensors"))
    got = load_file(str(run / "final" / "model.safetensors"))
    assert_same(expected, got)
    initial = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    assert any(not torch.equal(initial[name], got[name]) for name in initial)  # the reward moved the weights
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics if "bytes_exchanged" in m] == [1, 2]  # one before the kill, one after
    assert all(m["bytes_exchanged"] > 0 for m in metrics if "bytes_exchanged" in m)


@pytest.mark.slow
def test_a_node_removed_mid_iteration_and_one_joined_later_change_nothing(cluster, tiny_model_dir, local_run,
                                                                         tmp_path):
    """A worker node dies while its actor holds a unit: the unit is re-run on the other nodes and the actor's
    replacement waits for room (no CPU is free); a node joins: the replacement rebuilds the mean from the checkpoint
    and the update log, takes units, and every actor ends on the in-process mean."""
    local, records = local_run
    trainer = pooled(tiny_model_dir, tmp_path / "node-loss", cluster.address, prompt_shards=2, straggler_factor=0)
    evaluator = trainer.evaluator
    try:
        evaluator.start()
        nodes = evaluator.node_of()
        before = set(evaluator.workers)
        victim = next(node for node in cluster.worker_nodes if node.node_id in nodes.values())
        removed = []

        def remove_node(index):
            if not removed:  # the other actors hold units when it goes
                cluster.remove_node(victim)
                removed.append(victim)

        evaluate = evaluator.evaluate
        evaluator.evaluate = lambda *args, **kwargs: evaluate(*args, **kwargs, on_candidate=remove_node)
        first = trainer.step()
        assert removed and evaluator.lost >= 1 and evaluator.replaced >= 1
        assert len(evaluator.starting) == 1  # the replacement: no CPU left for it until a node joins
        evaluator.evaluate = evaluate
        cluster.add_node(num_cpus=1, object_store_memory=80 * 2 ** 20)
        import ray

        ray.get(list(evaluator.starting))  # the replacement starts on the new node (the scheduler then sees it join)
        second = trainer.step()
        for a, b in zip(records, (first, second)):
            assert a["reward_mean"] == b["reward_mean"] and a["reward_max"] == b["reward_max"]
        assert_same(state(local), state(trainer))
        assert not evaluator.starting and len(set(evaluator.node_of().values())) == 3
        [joined] = [worker for worker in evaluator.workers if worker not in before]
        assert evaluator.done_by[joined] >= 1  # the new node's actor took units
        evaluator.check_replicas()  # and holds the driver's mean, bit for bit
    finally:
        evaluator.close()

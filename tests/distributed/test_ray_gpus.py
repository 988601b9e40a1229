"""Which GPUs each engine is given under Ray. Ray accepts declared GPUs on a CPU machine (ray.init(num_gpus=2))
and hands out their ids as on a GPU node: the driver's own engine books its GPU first, so each actor's engine
gets a different one; a pool that does not fit the GPUs left is a clear error, not a hang."""

from __future__ import annotations

import os

import pytest
from helpers import TINY_EVAL_BUDGET, requires_ray, requires_vllm, save_vllm_tiny_model

from evotune.config import TrainConfig
from evotune.errors import ConfigError
from evotune.trainer import Trainer

pytestmark = [*requires_vllm, *requires_ray, pytest.mark.engine]  # Ray actors: the engine tier


@pytest.fixture(scope="module", autouse=True)
def ray_with_two_gpus():
    import ray

    if ray.is_initialized():  # another module's local Ray (conftest's ray_instance): this module declares GPUs
        ray.shutdown()
    ray.init(address="local", num_cpus=2, num_gpus=2, include_dashboard=False, logging_level="ERROR")
    yield
    ray.shutdown()


def config(model_dir: str, **overrides) -> TrainConfig:
    values = dict(model=model_dir, backend="vllm", task="conciseness", population_size=4, antithetic=True, sigma=0.3,
                  learning_rate=0.3, iterations=1, batch_size=2, max_new_tokens=4, num_eval=2, eval_every=0,
                  checkpoint_every=1, dtype="float32", report_to=[], distributed="ray", worker_num_gpus=1.0,
                  checksum_every=0, eval_max_new_tokens=TINY_EVAL_BUDGET)
    values.update(overrides)
    return TrainConfig(**values)


# The booking is the pool's, the same for both backends: CI books GPUs for hf replicas (no engine start); vLLM
# engine actors, ~40 s of engine starts on 2 cores, run with the slow tests, their engine path being in CI through
# test_ray_vllm.py.
@pytest.mark.parametrize("backend", ["hf", pytest.param("vllm", marks=pytest.mark.slow)])
def test_the_driver_and_each_actor_engine_get_their_own_gpu(tiny_model_dir, tmp_path, monkeypatch, backend):
    import ray

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # the driver's choice is undone after the test
    model_dir = save_vllm_tiny_model(str(tmp_path / "model"), tiny_model_dir) if backend == "vllm" else tiny_model_dir
    trainer = Trainer(config(model_dir, workers=1, backend=backend), tmp_path / "run")
    try:
        [driver] = ray.get(trainer.evaluator.driver_reservation.gpu_ids.remote())  # the GPU the driver booked
        if backend == "vllm":
            assert os.environ["CUDA_VISIBLE_DEVICES"] == driver  # set before the driver's engine started
        trainer.evaluator.start()
        [actor] = ray.get([worker.devices.remote() for worker in trainer.evaluator.workers])
        assert actor["gpu_ids"] == [actor["cuda_visible_devices"]]  # the actor's engine sees its own GPU only
        assert {driver, actor["cuda_visible_devices"]} == {"0", "1"}  # two engines, two GPUs, none shared
        trainer.step()  # and the pool runs
    finally:
        trainer.evaluator.close()
        trainer.backend.close()
    # both given back by the time close() returns (ray.kill returns before Ray frees them): the next test's run,
    # started right after, books them again as a sweep's next point would
    assert ray.available_resources().get("GPU") == 2


def test_a_pool_larger_than_the_gpus_left_is_a_clear_error(tiny_model_dir, tmp_path, monkeypatch):
    """The count is the backend's business only through the driver's share: an hf driver books its GPU as an
    engine does, and needs no engine start to show the error."""
    import ray

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    trainer = Trainer(config(tiny_model_dir, backend="hf", workers=2), tmp_path / "run")  # the driver holds 1 of 2
    try:
        assert ray.available_resources().get("GPU") == 1
        with pytest.raises(ConfigError, match="Set `workers` to 1"):
            trainer.evaluator.start()
        assert not trainer.evaluator.workers  # nothing started
    finally:
        trainer.evaluator.close()
        trainer.backend.close()

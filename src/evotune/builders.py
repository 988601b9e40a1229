"""Config -> the loop's parts: task, backend, space (with its optimizer), strategy, evaluator.

The trainer only composes them, and Ray actors build their replica through the same
`ReplicaFactory`, so a worker always has the configured backend and space.

Adapter spaces (ESSA: Korotyshova, Shaposhnikov et al., arXiv 2507.04453) wrap the loaded
model in a PEFT LoRA adapter, either one loaded from disk (the `evotune sft` warm start) or a
fresh one, and evolve only that adapter; the base weights are never written.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .backends.base import Backend
from .config.checks import resolve_device
from .config.parts import without_unread_keys
from .config.train import RunConfig, TrainConfig
from .distributed.base import Evaluator, Replica
from .files.reward_paths import shipped
from .optimizers import make_optimizer
from .spaces import Space
from .strategies import STRATEGIES, Strategy
from .tasks import Task, get_task


def build_task(config: RunConfig, reward_fns: list[Callable] | None = None,
               rows: tuple[list[dict], list[dict] | None] | None = None) -> Task:
    """The run's task, its split seeded by the data seed (`data_seed`, else `seed`). reward_fns: callables that
    stand for the config's import paths (ESTrainer's reward_funcs, which may not be importable by path).
    rows: task `custom`'s (train, eval or None) rows already in memory (ESTrainer's datasets, not yet written
    to `config.dataset`); split as the files would be, so a run resumed from those files sees the same task."""
    reward_fns = reward_fns or config.reward_fns or None
    if rows is not None:
        from .tasks.custom import custom_task

        task = custom_task(*rows, reward_fns, config.reward_weights or None, seed=config.data_seed_or_seed,
                           num_eval=config.num_eval, source="train_dataset")
    else:
        task = get_task(config.task, seed=config.data_seed_or_seed, num_eval=config.num_eval, dataset=config.dataset,
                        eval_dataset=config.eval_dataset, reward_fns=reward_fns,
                        reward_weights=config.reward_weights or None, **config.task_args)
    # a grpo or sft run's config, read for its task's rows (bench/quickstart/measure.py), has no reward timeout:
    # TRL calls its reward functions
    task.reward_timeout = getattr(config, "reward_timeout", 0.0) or None
    return task


# Registries: name -> the class that builds itself from a config (`from_config`). Per backend: its class and the
# space classes it runs, imported when asked for (vLLM's modules load only for `backend: vllm`).
BACKENDS = {"hf": ("evotune.backends.hf:HFBackend", "evotune.spaces:SPACES"),
            "vllm": ("evotune.backends.vllm:VLLMBackend", "evotune.backends.vllm_spaces:SPACES")}


def _named(path: str) -> Any:
    module, attribute = path.split(":")
    return getattr(importlib.import_module(module), attribute)


def backend_class(name: str) -> type:
    return _named(BACKENDS[name][0])


def space_classes(backend: str) -> dict[str, type]:
    return _named(BACKENDS[backend][1])


def build_space(config: TrainConfig, backend: Backend) -> Space:
    """The search space with the optimizer that moves its mean; for adapter spaces `backend.model`
    becomes the PEFT-wrapped model."""
    space_class = space_classes(config.backend)[config.space]
    optimizer = make_optimizer(config.optimizer, config.learning_rate, config.weight_decay, config.anchor_decay)
    # the base weights (anchor_decay, log_drift) are snapshotted as the space is built: before any checkpoint loads
    return space_class.from_config(config, backend, optimizer)


def on_hf_backend(config: TrainConfig) -> TrainConfig:
    """The same run's config on the hf backend in this process: what rebuilds its space from a checkpoint (HF
    tensors whatever the backend that wrote them) for `evotune eval`, or replays its updates (`evotune doctor`)."""
    values = {**config.to_dict(), "backend": "hf", "distributed": "local", "workers": 1}
    return TrainConfig.from_dict(without_unread_keys(values, TrainConfig))  # vLLM's and Ray's keys back to defaults


def load_backend(config: TrainConfig, device: str) -> Backend:
    return backend_class(config.backend).from_config(config, device)


def build_strategy(config: TrainConfig, space: Space) -> Strategy:
    return STRATEGIES[config.strategy].from_config(config, space)


@dataclass(frozen=True)
class ReplicaFactory:
    """Builds one replica (task, backend, space) from a config: picklable, so a Ray actor can build its
    own with exactly the driver's builder (and backend: hf or a vLLM engine per actor)."""

    config: dict[str, Any]
    # reward_fns by module name where Ray shipped their files (files/reward_paths.shipped), else ()
    shipped_reward_fns: tuple[Any, ...] = ()

    def __call__(self) -> Replica:
        config = TrainConfig.from_dict(self.config)
        if self.shipped_reward_fns:  # Ray's copy where it shipped one (another node), else the file itself
            config.reward_fns = [name if isinstance(name, str) and importlib.util.find_spec(name.split(":")[0].split(
                ".")[0]) is not None else path for name, path in zip(self.shipped_reward_fns, config.reward_fns)]
        backend = load_backend(config, resolve_device(config.device))
        return Replica(build_task(config), backend, build_space(config, backend), config.max_new_tokens)


def replica_num_gpus(config: TrainConfig) -> float:
    """GPUs one replica takes: `worker_num_gpus`, else on CUDA what its backend says (hf: 1, an engine: its
    `tensor_parallel_size`)."""
    if config.worker_num_gpus is not None:
        return config.worker_num_gpus
    import torch

    if not torch.cuda.is_available() or config.device == "cpu":
        return 0.0
    return backend_class(config.backend).gpus_per_replica(config)


def reserve_driver_gpus(config: TrainConfig) -> tuple[Any, str | None]:
    """`distributed: ray` with GPU replicas: the driver's own replica's GPUs booked in Ray before it loads, so that
    no actor is given them (distributed.ray.reserve_for_driver does it, and points the driver's engine at them).
    Returns (the reservation, for build_evaluator; the device of the driver's hf model, or None)."""
    gpus = replica_num_gpus(config)
    if config.distributed != "ray" or gpus == 0:
        return None, None
    from .distributed.ray import reserve_for_driver

    return reserve_for_driver(gpus, config.ray_address, config.ray_timeout,
                              engine=backend_class(config.backend).engine_processes,
                              device=resolve_device(config.device), py_modules=shipped(config.reward_fns)[1])


def build_evaluator(config: TrainConfig, replica: Replica, state_fn: Any = None,
                    driver_reservation: Any = None) -> Evaluator:
    """In process (one candidate at a time, or population-batched: adapter spaces, lowrank, full on hf), or a
    Ray actor pool (`distributed: ray`) whose new actors rebuild the driver's mean via state_fn();
    driver_reservation: reserve_driver_gpus' holder, released when the pool closes."""
    return EVALUATORS[config.distributed](config, replica, state_fn, driver_reservation)


def in_process_evaluator(config: TrainConfig, replica: Replica, state_fn: Any, driver_reservation: Any) -> Evaluator:
    """The space says whether its candidates can share a forward, the backend how many do (hf: when asked, or
    `auto` from free memory; a vLLM engine: the whole population as LoRA requests by default)."""
    from .distributed import BatchedEvaluator, LocalEvaluator

    model = getattr(replica.backend, "model", None)  # `auto`: the free memory of its device
    batch = backend_class(config.backend).population_batch(config, replica.space, model)
    if batch and batch > 1:
        return BatchedEvaluator.from_replica(replica, population_batch_size=batch)
    return LocalEvaluator.from_replica(replica)


def ray_evaluator(config: TrainConfig, replica: Replica, state_fn: Any, driver_reservation: Any) -> Evaluator:
    from .distributed.ray import RayEvaluator

    # A reward module beside the config travels to the actors' nodes with Ray's runtime_env, imported there by name
    names, py_modules = shipped(config.reward_fns)
    factory = ReplicaFactory(config.to_dict(), shipped_reward_fns=tuple(names))
    return RayEvaluator(factory, config.workers, state_fn, address=config.ray_address,
                        checksum_every=config.checksum_every, num_cpus=config.worker_num_cpus,
                        num_gpus=replica_num_gpus(config), driver_checksum=replica.space.checksum,
                        driver_reservation=driver_reservation, driver_fingerprint=replica.space.noise_fingerprint,
                        shards=config.prompt_shards, straggler_factor=config.straggler_factor,
                        timeout=config.ray_timeout, py_modules=py_modules)


EVALUATORS = {"local": in_process_evaluator, "ray": ray_evaluator}  # `distributed` -> how the population is scored

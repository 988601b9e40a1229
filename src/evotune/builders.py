"""Config -> the loop's parts: task, backend, space (with its optimizer), strategy, evaluator.

The trainer only composes them, and Ray actors build their replica through the same
`ReplicaFactory`, so a worker always has the configured backend and space.

Adapter spaces (ESSA: Korotyshova, Shaposhnikov et al., arXiv 2507.04453) wrap the loaded
model in a PEFT LoRA adapter, either one loaded from disk (the `evotune sft` warm start) or a
fresh one, and evolve only that adapter; the base weights are never written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .backends.base import Backend, resolve_device
from .config.train import ADAPTER_SPACES, TrainConfig
from .distributed.base import Evaluator, Replica
from .errors import ConfigError
from .spaces import FullParameterSpace, Space
from .strategies import Strategy
from .tasks import Task, get_task


def build_task(config: TrainConfig, reward_fns: list[Callable] | None = None,
               rows: tuple[list[dict], list[dict] | None] | None = None) -> Task:
    """The run's task, its split seeded by the data seed (`data_seed`, else `seed`). reward_fns: callables that
    stand for the config's import paths (ESTrainer's reward_funcs, which may not be importable by path).
    rows: task `custom`'s (train, eval or None) rows already in memory (ESTrainer's datasets, not yet written
    to `config.dataset`); split as the files would be, so a run resumed from those files sees the same task."""
    reward_fns = reward_fns or config.reward_fns or None
    if rows is not None:
        from .tasks.custom import custom_task

        return custom_task(*rows, reward_fns, config.reward_weights or None, seed=config.data_seed_or_seed,
                           num_eval=config.num_eval, source="train_dataset")
    return get_task(config.task, seed=config.data_seed_or_seed, num_eval=config.num_eval, dataset=config.dataset,
                    eval_dataset=config.eval_dataset, reward_fns=reward_fns, reward_weights=config.reward_weights
                    or None, **config.task_args)


def read_adapter_config(adapter: str) -> dict[str, Any]:
    """The PEFT adapter_config.json of `adapter` (valid JSON with PEFT's keys), or an error naming the fix."""
    from .files.adapters import read_adapter_config as read

    return read(adapter)


def attach_adapter(model: Any, config: TrainConfig) -> Any:
    """The model wrapped in its "default" LoRA adapter: loaded from `config.adapter`, or fresh."""
    from .spaces.lora import init_lora_adapter

    if config.adapter is None:
        return init_lora_adapter(model, config.lora_rank, config.lora_target_modules, config.lora_alpha,
                                 config.lora_init, config.seed)
    from peft import PeftModel

    from .files.adapters import check_adapter

    check_adapter(config.adapter, model, config.model)  # a clear error before PEFT's own
    return PeftModel.from_pretrained(model, config.adapter, adapter_name="default").eval()


def build_space(config: TrainConfig, backend: Backend) -> Space:
    """The search space with the optimizer that moves its mean; for adapter spaces `backend.model`
    becomes the PEFT-wrapped model."""
    from .optimizers import make_optimizer

    optimizer = make_optimizer(config.optimizer, config.learning_rate, config.weight_decay, config.anchor_decay)
    # the base weights (anchor_decay, log_drift) are snapshotted as the space is built: before any checkpoint loads
    base = dict(anchor_decay=config.anchor_decay, keep_base=config.log_drift)
    if config.prefetch_candidates and (config.space != "full" or config.backend != "hf"):
        raise ConfigError(f"`prefetch_candidates` writes the next candidate into a second copy of a model's weights, "
                          f"which only `space: full` with `backend: hf` has (here space {config.space}, backend "
                          f"{config.backend}); set `prefetch_candidates: false`.")
    if config.backend == "vllm" and config.space == "full":  # the engine holds the weights: a proxy space
        from .backends.vllm_spaces import EngineSpace

        return EngineSpace(backend, hf_parameter_shapes(backend.model_name), config.parameters or None,
                           config.exclude_parameters or None, config.noise, config.optimizer, config.learning_rate,
                           config.weight_decay, master_device=config.master_device, **base)
    if config.space == "full":
        return FullParameterSpace(backend.model, config.parameters or None, config.exclude_parameters or None,
                                  noise_kind=config.noise, optimizer=optimizer, keep_base=config.log_drift,
                                  prefetch=config.prefetch_candidates)
    if config.space == "lowrank":  # EGGROLL: rank-r members of a full-parameter mean (spaces/lowrank.py)
        from .spaces.lowrank import LowRankSpace

        if config.backend == "vllm":  # the engine holds the mean; members are LoRA requests
            from .backends.vllm_spaces import EngineLowRankSpace

            shapes, linear = hf_parameter_shapes(backend.model_name), hf_linear_weight_names(backend.model_name)
            return EngineLowRankSpace(backend, shapes, linear, config.perturbation_rank, config.parameters or None,
                                      config.exclude_parameters or None, config.noise, config.optimizer,
                                      config.learning_rate, config.weight_decay, **base)
        return LowRankSpace(backend.model, config.perturbation_rank, config.parameters or None,
                            config.exclude_parameters or None, noise_kind=config.noise, optimizer=optimizer,
                            keep_base=config.log_drift)
    from .spaces.lora import LoRASpace
    from .spaces.svd_lora import SVDLoRASpace

    backend.model = attach_adapter(backend.model, config)
    if config.space == "lora":
        return LoRASpace(backend.model, noise_kind=config.noise, optimizer=optimizer)
    return SVDLoRASpace(backend.model, alpha=config.singular_value_fraction, noise_kind=config.noise,
                        optimizer=optimizer, offsets=config.svd_offsets)


def on_hf_backend(config: TrainConfig) -> TrainConfig:
    """The same run's config on the hf backend in this process: what rebuilds its space from a checkpoint (HF
    tensors whatever the backend that wrote them) for `evotune eval`, or replays its updates (`evotune doctor`)."""
    return TrainConfig.from_dict({**config.to_dict(), "backend": "hf", "tensor_parallel_size": 1,
                                  "distributed": "local", "workers": 1, "worker_num_gpus": None})


def hf_parameter_shapes(model: str) -> dict[str, list[int]]:
    """Parameter names and shapes of an HF model, from its config alone (meta device: no weights loaded)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model))
    return {name: list(param.shape) for name, param in skeleton.named_parameters()}


def hf_linear_weight_names(model: str) -> list[str]:
    """Names of an HF model's Linear weights that `space: lowrank` perturbs (tied heads left out), from its
    config alone."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from .spaces.lowrank import linear_weights

    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model))
    return [name for _, name, _ in linear_weights(skeleton)]


def load_backend(config: TrainConfig, device: str) -> Backend:
    if config.backend == "vllm":
        from .backends.vllm import VLLMBackend

        engine = dict(seed=config.seed, engine_core=config.engine_core,
                      tensor_parallel_size=config.tensor_parallel_size,
                      gpu_memory_utilization=config.gpu_memory_utilization)
        if config.space == "lowrank":  # members as rank-r LoRA requests over the engine's own (mean) weights
            return VLLMBackend(config.model, config.dtype, lora_rank=config.perturbation_rank,
                               max_loras=vllm_population_batch(config), host_model=False, **engine)
        if config.space not in ADAPTER_SPACES:
            return VLLMBackend(config.model, config.dtype, **engine)
        # Adapter spaces: the engine serves the population as LoRA adapters, all in one batch by default.
        return VLLMBackend(config.model, config.dtype, quantization=config.quantization,
                           lora_rank=adapter_rank(config), max_loras=vllm_population_batch(config), **engine)
    from .backends import HFBackend
    from .backends.quantized import QuantizationSettings

    return HFBackend.load(config.model, config.dtype, device, config.generation_batch_size,
                          QuantizationSettings.from_config(config),
                          shared_prefix=config.shared_prefix, compile_generation=bool(config.compile_generation))


def adapter_rank(config: TrainConfig) -> int:
    """The rank of the adapter the run evolves: the loaded adapter's `r`, else `lora_rank`."""
    if config.adapter is None:
        return config.lora_rank
    return int(read_adapter_config(config.adapter)["r"])


def vllm_population_batch(config: TrainConfig) -> int:
    """Candidates per engine batch on vLLM: `population_batch_size`, else the whole population."""
    return config.population_batch_size or config.population_size


def build_strategy(config: TrainConfig, space: Space) -> Strategy:
    from .strategies import CMAES, OpenES

    if config.strategy == "cma":  # CMA-ES owns the mean; it starts where the space is (zero offsets)
        return CMAES(config.population_size, config.sigma, initial_mean=space.mean_vector(),
                     diagonal=config.cma_diagonal, seed=config.seed)
    return OpenES(config.population_size, config.sigma, config.antithetic, config.fitness_shaping, config.seed)


@dataclass(frozen=True)
class ReplicaFactory:
    """Builds one replica (task, backend, space) from a config: picklable, so a Ray actor can build its
    own with exactly the driver's builder (and backend: hf or a vLLM engine per actor)."""

    config: dict[str, Any]

    def __call__(self) -> Replica:
        config = TrainConfig.from_dict(self.config)
        backend = load_backend(config, resolve_device(config.device))
        return Replica(build_task(config), backend, build_space(config, backend), config.max_new_tokens)


def replica_num_gpus(config: TrainConfig) -> float:
    """GPUs one replica takes: `worker_num_gpus`, else on CUDA an engine's `tensor_parallel_size` (hf: 1)."""
    if config.worker_num_gpus is not None:
        return config.worker_num_gpus
    import torch

    if not torch.cuda.is_available() or config.device == "cpu":
        return 0.0
    return float(config.tensor_parallel_size) if config.backend == "vllm" else 1.0


def reserve_driver_gpus(config: TrainConfig) -> tuple[Any, str | None]:
    """`distributed: ray` with GPU replicas: book the GPUs of the driver's own replica in Ray before it loads,
    so that no actor is given them. Returns (the reservation, for build_evaluator; the device the driver's
    hf model goes to, or None). A vLLM engine is pointed at them through CUDA_VISIBLE_DEVICES, which its
    processes read when they start."""
    gpus = replica_num_gpus(config)
    if config.distributed != "ray" or gpus == 0:
        return None, None
    import os

    from .distributed.ray import reserve_driver_gpus as reserve

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    holder, ids = reserve(gpus, config.ray_address, config.ray_timeout)
    if config.backend == "vllm":
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
        return holder, None
    if not ids or not resolve_device(config.device).startswith("cuda"):
        return holder, None
    # hf in this process: CUDA may already be initialised here, so name the device instead
    order = visible.split(",") if visible else None
    return holder, f"cuda:{order.index(ids[0]) if order else int(ids[0])}"


def build_evaluator(config: TrainConfig, replica: Replica, state_fn: Any = None,
                    driver_reservation: Any = None) -> Evaluator:
    """In process (one candidate at a time, or population-batched: adapter spaces, lowrank, full on hf), or a
    Ray actor pool (`distributed: ray`) whose new actors rebuild the driver's mean via state_fn();
    driver_reservation: reserve_driver_gpus' holder, released when the pool closes."""
    from .distributed import LocalEvaluator

    if config.distributed == "ray":
        from .distributed.ray import RayEvaluator

        return RayEvaluator(ReplicaFactory(config.to_dict()), config.workers, state_fn, address=config.ray_address,
                            checksum_every=config.checksum_every, num_cpus=config.worker_num_cpus,
                            num_gpus=replica_num_gpus(config), driver_checksum=replica.space.checksum,
                            driver_reservation=driver_reservation, driver_fingerprint=replica.space.noise_fingerprint,
                            shards=config.prompt_shards, straggler_factor=config.straggler_factor,
                            timeout=config.ray_timeout)

    batch = vllm_population_batch(config) if config.backend == "vllm" else config.population_batch_size
    if config.space == "full" and config.backend != "hf":  # stacked full-rank copies are the hf backend's
        batch = None
    if config.space == "lowrank":  # the point of low-rank members: the whole population in one batch by default
        batch = config.population_batch_size or config.population_size
    if batch == "auto":  # space full on hf: as many stacked copies as the device's free memory holds (CPU: 1)
        from .backends.stacked_weights import auto_population_batch

        batch = auto_population_batch(replica.backend.model, replica.space.parameters, config.population_size,
                                      config.generation_batch_size or config.batch_size, config.max_new_tokens)
    if config.space in (*ADAPTER_SPACES, "lowrank", "full") and batch and batch > 1:
        from .distributed import BatchedEvaluator

        return BatchedEvaluator.from_replica(replica, population_batch_size=batch)
    return LocalEvaluator.from_replica(replica)

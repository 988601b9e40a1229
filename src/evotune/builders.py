"""Config -> the loop's parts: space, strategy, evaluator. The trainer only composes them.

Adapter spaces (ESSA: Korotyshova, Shaposhnikov et al., arXiv 2507.04453) wrap the loaded
model in a PEFT LoRA adapter, either one loaded from disk (the `evotune sft` warm start) or a
fresh one, and evolve only that adapter; the base weights are never written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .config import TrainConfig
from .errors import ConfigError
from .spaces import FullParameterSpace, Space

ADAPTER_SPACES = ("lora", "svd_lora")


def attach_adapter(model: Any, config: TrainConfig) -> Any:
    """The model wrapped in its "default" LoRA adapter: loaded from `config.adapter`, or fresh."""
    from .spaces.lora import init_lora_adapter

    if config.adapter is None:
        return init_lora_adapter(model, config.lora_rank, config.lora_target_modules, config.lora_alpha,
                                 config.lora_init, config.seed)
    from peft import PeftModel

    directory = Path(config.adapter)
    if not (directory / "adapter_config.json").exists():
        raise ConfigError(f"`adapter` is {config.adapter!r}, which holds no adapter_config.json; point it at a "
                          "PEFT adapter directory (an `evotune sft` run writes DIR/adapter), or remove `adapter` "
                          "to start from a fresh LoRA.")
    return PeftModel.from_pretrained(model, str(directory), adapter_name="default").eval()


def build_space(config: TrainConfig, backend: Any) -> Space:
    """The search space; for adapter spaces `backend.model` becomes the PEFT-wrapped model."""
    if config.backend == "vllm" and config.space == "full":  # the engine holds the weights: a proxy space
        from .backends.vllm import EngineSpace

        return EngineSpace(backend, hf_parameter_shapes(backend.model_name), config.parameters or None,
                           config.exclude_parameters or None, config.noise, config.optimizer, config.learning_rate,
                           config.weight_decay)
    if config.space == "full":
        return FullParameterSpace(backend.model, config.parameters or None, config.exclude_parameters or None,
                                  noise_kind=config.noise)
    from .spaces.lora import LoRASpace
    from .spaces.svd_lora import SVDLoRASpace

    backend.model = attach_adapter(backend.model, config)
    if config.space == "lora":
        return LoRASpace(backend.model, noise_kind=config.noise)
    return SVDLoRASpace(backend.model, alpha=config.singular_value_fraction, noise_kind=config.noise)


def hf_parameter_shapes(model: str) -> dict[str, list[int]]:
    """Parameter names and shapes of an HF model, from its config alone (meta device: no weights loaded)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model))
    return {name: list(param.shape) for name, param in skeleton.named_parameters()}


def load_backend(config: TrainConfig, device: str) -> Any:
    if config.backend == "vllm":
        from .backends.vllm import VLLMBackend

        if config.space not in ADAPTER_SPACES:
            return VLLMBackend(config.model, config.dtype, seed=config.seed)
        # Adapter spaces: the engine serves the population as LoRA adapters, all in one batch by default.
        return VLLMBackend(config.model, config.dtype, quantization=config.quantization, seed=config.seed,
                           lora_rank=adapter_rank(config), max_loras=vllm_population_batch(config))
    from .backends import HFBackend

    return HFBackend.load(config.model, config.dtype, device, config.generation_batch_size, config.quantization)


def adapter_rank(config: TrainConfig) -> int:
    """The rank of the adapter the run evolves: the loaded adapter's `r`, else `lora_rank`."""
    if config.adapter is None:
        return config.lora_rank
    import json

    path = Path(config.adapter) / "adapter_config.json"
    if not path.exists():
        raise ConfigError(f"`adapter` is {config.adapter!r}, which holds no adapter_config.json; point it at a PEFT "
                          "adapter directory (an `evotune sft` run writes DIR/adapter).")
    return int(json.loads(path.read_text())["r"])


def vllm_population_batch(config: TrainConfig) -> int:
    """Candidates per engine batch on vLLM: `population_batch_size`, else the whole population."""
    return config.population_batch_size or config.population_size


def build_strategy(config: TrainConfig, space: Any) -> Any:
    from .strategies import CMAES, OpenES

    if config.strategy == "cma":  # CMA-ES owns the mean; it starts where the space is (zero offsets)
        return CMAES(config.population_size, config.sigma, initial_mean=space.mean_vector(),
                     diagonal=config.cma_diagonal, seed=config.seed)
    return OpenES(config.population_size, config.sigma, config.learning_rate, config.antithetic,
                  config.fitness_shaping, config.optimizer, config.weight_decay, config.seed)


def build_evaluator(config: TrainConfig, space: Any, backend: Any, task: Any,
                    state_fn: Any = None, driver_checksum: Any = None) -> Any:
    """In process, or a Ray actor pool (`distributed: ray`) whose new actors rebuild the mean via state_fn()."""
    from .distributed import LocalEvaluator

    if config.distributed == "ray":
        import torch

        from .distributed.ray import RayEvaluator

        gpus = config.worker_num_gpus
        if gpus is None:
            gpus = 1.0 if torch.cuda.is_available() and config.device != "cpu" else 0.0
        return RayEvaluator(config, config.workers, state_fn, address=config.ray_address,
                            checksum_every=config.checksum_every, num_cpus=config.worker_num_cpus, num_gpus=gpus,
                            driver_checksum=driver_checksum)

    batch = vllm_population_batch(config) if config.backend == "vllm" else config.population_batch_size
    if config.space in ADAPTER_SPACES and batch and batch > 1:
        from .distributed import BatchedEvaluator

        return BatchedEvaluator(space, backend, task, config.max_new_tokens, batch)
    return LocalEvaluator(space, backend, task, config.max_new_tokens)

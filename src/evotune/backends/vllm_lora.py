"""Adapter candidates as vLLM LoRA requests: the population-batched evaluation of ESSA on GPU.

ESSA (Korotyshova, Shaposhnikov et al., arXiv 2507.04453) evolves only a LoRA adapter, so a
population is P small adapters over one shared base. vLLM's multi-LoRA serving (`enable_lora`,
one `LoRARequest` per request) runs requests for different adapters in the same batch, which is
the GPU form of backends/multi_lora.py: one `generate` call for the whole population.

vLLM loads adapters from PEFT directories, so each candidate is written as one (adapter_config.json
+ adapter_model.safetensors) under a scratch directory, in RAM (/dev/shm) where available. Every
written adapter gets a new integer id: vLLM caches loaded adapters by id, and a reused id would
serve the previous candidate's weights. Nothing here imports vllm (the engine side is vllm.py),
so the files and ids are tested on CPU.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..errors import ConfigError

# LoRA ranks a vLLM engine accepts for `max_lora_rank`.
ENGINE_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# evotune's `quantization` names -> vLLM's in-flight method (bitsandbytes quantizes to 4 bits on load).
ENGINE_QUANTIZATION = {"none": None, "int4": "bitsandbytes"}


def engine_lora_rank(rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds adapters of rank `rank`."""
    for allowed in ENGINE_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ConfigError(f"`lora_rank` is {rank}; vLLM serves LoRA ranks up to {ENGINE_LORA_RANKS[-1]}.")


def engine_quantization(name: str, available: list[str] | None = None) -> str | None:
    """vLLM's quantization method for evotune's `quantization` value, or a clear error.

    `available`: the methods the installed vLLM accepts (vllm.model_executor.layers.quantization
    .QUANTIZATION_METHODS); vLLM 0.32 has no bitsandbytes method and no in-flight INT4/INT8 for dense
    layers, so there the only INT4 path is a checkpoint quantized beforehand.
    """
    if name not in ENGINE_QUANTIZATION:
        raise ConfigError(f"`quantization: {name}` has no in-flight form in vLLM (its bitsandbytes loader is 4-bit "
                          "only): use `quantization: int4`, or point `model` at a pre-quantized INT8 checkpoint "
                          "(vLLM reads its quantization_config) with `quantization: none`.")
    method = ENGINE_QUANTIZATION[name]
    if method is not None and available is not None and method not in available:
        raise ConfigError(f"`quantization: {name}` quantizes the engine in flight with {method}, which this vLLM "
                          "no longer offers: set `quantization: none` and point `model` at a pre-quantized INT4 "
                          "checkpoint (AWQ or GPTQ; vLLM reads its quantization_config, and AWQ runs on CPU too), "
                          "or use `backend: hf` (bitsandbytes on CUDA).")
    return method


def peft_config_dict(model: Any, adapter: str = "default") -> dict[str, Any]:
    """adapter_config.json's content for `model`'s adapter, as PEFT's save_pretrained writes it."""
    config = model.peft_config[adapter].to_dict()
    return {key: sorted(value) if isinstance(value, set) else value for key, value in config.items()}


def lowrank_adapter_config(model_name: str, rank: int, modules: Sequence[str]) -> dict[str, Any]:
    """adapter_config.json's content for `space: lowrank` members served as LoRA requests (EGGROLL's
    eggroll-vllm: each member a rank-r LoRA): lora_alpha = r, so PEFT's and vLLM's scaling is 1 and a
    member's delta is exactly B @ A of LowRankSpace.candidate_factors; the targets are the module names'
    last parts (q_proj, ...)."""
    from peft import LoraConfig

    targets = sorted({module.rsplit(".", 1)[-1] for module in modules})
    config = LoraConfig(r=rank, lora_alpha=rank, target_modules=targets, lora_dropout=0.0, bias="none",
                        task_type="CAUSAL_LM", base_model_name_or_path=model_name).to_dict()
    return {key: sorted(value) if isinstance(value, set) else value for key, value in config.items()}


def population_state_dicts(factors: Sequence[Any], stacked: Sequence[torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    """Per candidate, its PEFT adapter state dict; stacked[i]: (P, *factors[i].weight.shape)."""
    population = int(stacked[0].shape[0])
    return [{factor.state_key: tensor[index] for factor, tensor in zip(factors, stacked)}
            for index in range(population)]


class AdapterWriter:
    """Writes adapters as PEFT directories and names each with a never-reused (name, id, path)."""

    def __init__(self, config: dict[str, Any], directory: str | None = None):
        self.config_text = json.dumps(config, indent=2)
        shared_memory = Path("/dev/shm")
        parent = directory or (str(shared_memory) if shared_memory.is_dir() else None)
        self.root = Path(tempfile.mkdtemp(prefix="evotune-adapters-", dir=parent))
        self.next_id = 1  # vLLM reserves id 0 for "no adapter"
        self.live: list[Path] = []

    def write(self, state_dicts: Sequence[dict[str, torch.Tensor]]) -> list[tuple[str, int, str]]:
        """One directory per state dict; returns LoRARequest arguments (name, int id, path) in order.

        Call clear() once the engine has generated with them: the engine copies what it loads.
        """
        requests = []
        for state in state_dicts:
            identifier = self.next_id
            self.next_id += 1
            path = self.root / f"candidate-{identifier}"
            path.mkdir()
            save_file({key: value.detach().to("cpu", torch.float32).contiguous() for key, value in state.items()},
                      str(path / "adapter_model.safetensors"))
            (path / "adapter_config.json").write_text(self.config_text)
            self.live.append(path)
            requests.append((f"candidate-{identifier}", identifier, str(path)))
        return requests

    def clear(self) -> None:
        for path in self.live:
            shutil.rmtree(path, ignore_errors=True)
        self.live = []

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

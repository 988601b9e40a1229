"""The Space contract over a vLLM engine's own weights (`backend: vllm`): every call is one
collective_rpc into the engine's worker (backends/vllm_worker.py, EngineWeightsExtension), which holds the
real space; only seeds, scales and coefficients go in. vllm itself is not imported here.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..optimizers import Optimizer
from ..spaces import SPACES as HF_SPACES
from ..spaces.base import FactoredSpace, Space
from ..spaces.full import MASTER_DEVICES
from ..spaces.lowrank import LowRankNoise, linear_weights

if TYPE_CHECKING:
    from .vllm import VLLMBackend




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


    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model))
    return [name for _, name, _ in linear_weights(skeleton)]


class EngineSpace(Space):
    """The Space contract over an engine: every call is one collective_rpc (seeds in, nothing out).

    The engine keeps its own optimizer, built from the same settings and fed the same steps; this
    side keeps an identical one only for its counters (checkpoint state), since SGD has no tensors.
    `master_device` (host | device | auto) is where the engine keeps the fp32 master on CUDA:
    host costs 8 bytes of host->GPU traffic per weight per candidate (apply and restore), device
    costs 4 bytes of GPU memory per weight (auto: device when that leaves spaces.full.MASTER_HEADROOM_BYTES free).
    """

    @classmethod
    def from_config(cls, config: Any, backend: VLLMBackend, optimizer: Any) -> EngineSpace:
        """`space: full` on a vLLM engine (registry entry): the engine holds the weights, this is a proxy; the
        engine rebuilds `optimizer` from its description."""
        return cls(backend, hf_parameter_shapes(backend.model_name), config.parameters or None,
                   config.exclude_parameters or None, config.noise, optimizer, master_device=config.master_device,
                   keep_base=config.log_drift)

    def __init__(self, backend: VLLMBackend, hf_shapes: dict[str, list[int]], include: list[str] | None,
                 exclude: list[str] | None, noise_kind: str, optimizer: Optimizer, master_device: str = "auto",
                 perturbation_rank: int | None = None, linear_names: list[str] | None = None,
                 keep_base: bool = False):
        """optimizer: the chain every rank's space steps with; each rank builds the same one from
        `optimizer.describe()` (plain values: msgpack carries them to an engine core in another process), and this
        proxy keeps the driver's copy for the step counter the checkpoint records. perturbation_rank,
        linear_names: the engine side's LowRankSpace (EngineLowRankSpace). keep_base (and an optimizer with
        anchored decay): the engine snapshots its own base weights in its process (spaces/drift.py); only the
        numbers of drift_metrics come back."""
        if master_device not in MASTER_DEVICES:
            raise ConfigError(f"`master_device` is {master_device!r}; set it to one of {', '.join(MASTER_DEVICES)}.")
        self.backend = backend
        self.optimizer = optimizer
        counts = backend.rpc("evotune_init", hf_shapes, include, exclude, noise_kind, optimizer.describe(),
                             master_device, perturbation_rank, linear_names,
                             keep_base)  # one per tensor-parallel rank, all equal
        self.num_parameters = counts[0]

    def apply(self, member: Any) -> None:
        self.backend.rpc("evotune_apply", member.seed, member.scale)

    def restore(self) -> None:
        self.backend.rpc("evotune_restore")

    def step(self, seeds: list[int], coefficients: list[float]) -> None:
        self.optimizer.begin_step()
        self.backend.rpc("evotune_update", [int(seed) for seed in seeds], [float(c) for c in coefficients])

    def state_tensors(self) -> dict[str, Any]:
        """The whole fp32 mean as an HF state dict: every rank writes its part to a scratch file (under
        $TMPDIR), assembled here. Files, not RPC results: nothing but plain values crosses msgpack."""
        from .engine_state import assemble_ranks

        with tempfile.TemporaryDirectory(prefix="evotune-engine-state-") as directory:
            return assemble_ranks(self.backend.rpc("evotune_save_state", directory))

    def load_state_tensors(self, tensors: dict[str, Any]) -> None:
        from safetensors.torch import save_file

        with tempfile.TemporaryDirectory(prefix="evotune-engine-state-") as directory:
            path = os.path.join(directory, "mean.safetensors")
            save_file({name: tensor.detach().to("cpu").contiguous() for name, tensor in tensors.items()}, path)
            self.backend.rpc("evotune_load_state", path)

    def mean_is_finite(self) -> bool:
        """Checked inside the engine (one bool per rank), not by pulling the mean out every iteration."""
        return all(self.backend.rpc("evotune_is_finite"))

    def drift_metrics(self) -> dict[str, float]:
        """drift/ metrics from every rank's sums over its own weights (plain numbers; spaces/drift.py)."""
        from ..spaces.drift import add_sums, weight_drift

        return weight_drift(add_sums(self.backend.rpc("evotune_drift_sums")))

    def checksum(self) -> str:
        """A hash of every rank's hash of its mean: engines with the same tensor_parallel_size that applied
        the same updates agree."""
        digest = hashlib.blake2b(digest_size=16)
        for rank_digest in self.backend.rpc("evotune_checksum"):
            digest.update(rank_digest.encode())
        return digest.hexdigest()

    def noise_fingerprint(self) -> str:
        return "|".join(sorted(set(self.backend.rpc("evotune_noise_fingerprint"))))

    def transfer_bytes(self) -> dict[str, Any]:
        return self.backend.rpc("evotune_transfer_bytes")[0]

    def transfer_bytes_per_rank(self) -> list[dict[str, Any]]:
        """transfer_bytes of every tensor-parallel rank (each holds and moves only its shard)."""
        return self.backend.rpc("evotune_transfer_bytes")

    def save_pretrained(self, directory: str, backend: VLLMBackend | None = None) -> None:
        self.restore()
        (backend or self.backend).save_pretrained(directory, self.state_tensors())


class EngineLowRankSpace(EngineSpace, FactoredSpace):
    """`space: lowrank` (EGGROLL, Sarkar et al., arXiv 2511.16652) on a vLLM engine, as eggroll-vllm does it.

    The mean is the engine's own weights, moved in place by a LowRankSpace inside the worker (the same
    fp32 master and seeds-only update as the hf backend); a member is served as a rank-r LoRA request
    whose factors (LowRankNoise, from names and shapes alone) are what LowRankSpace.candidate_factors
    gives on the hf backend, so a population is one engine batch. apply() (Ray actors, one member at a
    time) writes the dense perturbation into the engine's weights instead.
    """
    population_batching = "whole"  # the population as LoRA requests, one engine batch by default

    @classmethod
    def from_config(cls, config: Any, backend: VLLMBackend, optimizer: Any) -> EngineLowRankSpace:
        """`space: lowrank` on a vLLM engine (registry entry): the engine holds the mean, members are LoRA requests."""
        return cls(backend, hf_parameter_shapes(backend.model_name), hf_linear_weight_names(backend.model_name),
                   config.perturbation_rank, config.parameters or None, config.exclude_parameters or None,
                   config.noise, optimizer, keep_base=config.log_drift)

    def __init__(self, backend: VLLMBackend, hf_shapes: dict[str, list[int]], linear_names: list[str], rank: int,
                 include: list[str] | None, exclude: list[str] | None, noise_kind: str, optimizer: Optimizer,
                 master_device: str = "auto", keep_base: bool = False):
        from ..spaces.full import select_parameters
        from .vllm_lora import lowrank_adapter_config

        super().__init__(backend, hf_shapes, include, exclude, noise_kind, optimizer, master_device, rank,
                         list(linear_names), keep_base)
        selected = [name for name, _ in select_parameters(None, include, exclude,
                                                          [(name, None) for name in linear_names])]
        self.noise = LowRankNoise({name: tuple(hf_shapes[name]) for name in selected}, rank, noise_kind)
        self.factors = self.noise.factors
        backend.adapter_config = lowrank_adapter_config(backend.model_name, rank,
                                                        [module for module, _ in self.noise.modules])

    def candidate_factors(self, candidates: Sequence[Any]) -> list[Any]:
        """Per factor, every member's LoRA matrix (P, *factor.shape), fp32: the LoRA requests' weights."""
        return self.noise.candidate_factors(candidates)


# The space classes of a vLLM backend: the engine holds the full-rank and low-rank means; adapter spaces evolve a
# host-side PEFT model as on the hf backend (spaces.SPACES).
SPACES = {**HF_SPACES, "full": EngineSpace, "lowrank": EngineLowRankSpace}

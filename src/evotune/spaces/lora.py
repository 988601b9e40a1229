"""LoRA adapter spaces: search over a PEFT adapter's weights, never the base model's.

The base model stays frozen (it may be quantized: only forward passes run through it);
a candidate rewrites the adapter's lora_A / lora_B matrices. Like VectorSpace, a
candidate is either a Candidate(seed, scale) (OpenES: mean + scale * noise(seed)) or a
numpy vector (CMA-ES: an absolute point). The noise of every block is
`noise(shape, seed, "<prefix>/<module name>/<A|B>")`, a pure function of seed and name,
so workers exchange seeds, never tensors.

Exactness: the mean is an fp32 vector on the host. apply() writes weights(mean + perturbation)
and restore() writes weights(mean) computed once per mean, never add-then-subtract, so the
adapter is bit-identical after any number of apply/restore cycles.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import ConfigError
from ..files.adapters import check_adapter, check_target_modules
from ..optimizers import Optimizer
from ..types import Candidate, Member
from .base import FactoredSpace, ModelWriter
from .drift import factor_product_squares, ratio, sum_of_squares
from .noise import noise

DEFAULT_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
LORA_INITS = {"kaiming": True, "gaussian": "gaussian"}  # our name -> PEFT's init_lora_weights


def attach_adapter(model: torch.nn.Module, config: Any) -> Any:
    """The model wrapped in its "default" LoRA adapter: loaded from `config.adapter` (checked first, with a clear
    error before PEFT's own), or a fresh one of `lora_rank` on `lora_target_modules`."""
    if config.adapter is None:
        return init_lora_adapter(model, config.lora_rank, config.lora_target_modules, config.lora_alpha,
                                 config.lora_init, config.seed)
    from peft import PeftModel


    check_adapter(config.adapter, model, config.model)
    return PeftModel.from_pretrained(model, config.adapter, adapter_name="default").eval()


def init_lora_adapter(model: torch.nn.Module, rank: int = 8,
                      target_modules: Sequence[str] = DEFAULT_TARGET_MODULES, lora_alpha: float = 16,
                      init: str = "kaiming", seed: int = 0) -> Any:
    """Wrap a transformers causal LM in a fresh PEFT LoRA adapter ("default"), seeded.

    init="kaiming" is PEFT's default and ESSA's no-SFT start: A Kaiming-uniform, B zero, so
    the adapter starts as a no-op. PEFT draws A from the global torch RNG; we fork it, seed
    it with `seed`, and leave the caller's RNG state untouched.
    """
    from peft import LoraConfig, get_peft_model


    if init not in LORA_INITS:
        raise ConfigError(f"LoRA init={init!r} is unknown; choose one of {sorted(LORA_INITS)}.")
    if rank < 1:
        raise ConfigError(f"LoRA rank={rank} must be a positive integer.")
    # ["all-linear"] is PEFT's "all-linear" (every linear layer but the output head), which PEFT takes as a string
    targets = "all-linear" if list(target_modules) == ["all-linear"] else list(target_modules)
    check_target_modules(model, targets, "lora_target_modules")
    config = LoraConfig(r=rank, lora_alpha=lora_alpha, target_modules=targets, lora_dropout=0.0,
                        bias="none", init_lora_weights=LORA_INITS[init], task_type="CAUSAL_LM")
    training = model.training
    cuda = sorted({p.device.index or 0 for p in model.parameters() if p.device.type == "cuda"})
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)  # seeds the CPU generator and every CUDA one
        peft_model = get_peft_model(model, config)
    return peft_model.train(training)  # new LoRA modules default to train mode; keep the model's


@dataclass(frozen=True)
class LoRAFactor:
    """One LoRA matrix of one adapted module."""

    module: str  # PEFT module name, e.g. "base_model.model.model.layers.0.self_attn.q_proj"
    factor: str  # "A" (weight (r, in)) or "B" (weight (out, r))
    weight: torch.nn.Parameter  # the live lora_A[adapter].weight or lora_B[adapter].weight

    @property
    def state_key(self) -> str:
        """The key PEFT's get_peft_model_state_dict / save_pretrained use (adapter name dropped)."""
        return f"{self.module}.lora_{self.factor}.weight"


def lora_factors(model: torch.nn.Module, adapter: str = "default") -> list[LoRAFactor]:
    """Every (A, B) pair of `adapter`, in a fixed order: sorted module names, A then B."""
    from peft.tuners.lora import LoraLayer

    factors = []
    for name, module in sorted(model.named_modules(), key=lambda item: item[0]):
        if isinstance(module, LoraLayer) and adapter in module.lora_A:
            factors.append(LoRAFactor(name, "A", module.lora_A[adapter].weight))
            factors.append(LoRAFactor(name, "B", module.lora_B[adapter].weight))
    if not factors:
        raise ConfigError(f"the model has no LoRA adapter named {adapter!r}: wrap it first with "
                          "evotune.spaces.lora.init_lora_adapter(model) or peft.get_peft_model.")
    return factors


class AdapterSpace(FactoredSpace):
    """Shared machinery: a flat fp32 mean (d,) on the host, split into named noise blocks.

    A subclass sets `self.blocks` ([(noise name, shape)], concatenated in order = the vector)
    and `self.mean`, implements `_weights(vector)` (one tensor per factor), then calls
    `_mean_changed()`.
    """
    population_batching = "requested"  # stacked adapters in one forward; a vLLM engine's LoRA requests

    def __init__(self, model: torch.nn.Module, adapter: str, noise_kind: str, optimizer: Optimizer | None):
        self.model = model
        self.adapter = adapter
        self.noise_kind = noise_kind
        self.optimizer = optimizer
        self.factors = lora_factors(model, adapter)
        self.blocks: list[tuple[str, tuple[int, ...]]] = []
        self.mean = torch.zeros(0)
        self.start = torch.zeros(0)  # (d,) the starting vector: the base of anchored weight decay and drift
        self._mean_weights: list[torch.Tensor] = []
        self._base_squares: float | None = None  # sum of the adapted modules' base weights squared (drift)

    @abstractmethod
    def _weights(self, vector: torch.Tensor) -> list[torch.Tensor]:
        """The adapter matrices (one per factor, in order) at the point `vector` (d,)."""

    def _begin(self, mean: torch.Tensor) -> None:
        """Adopt the starting vector (d,) fp32, remembered as `start` before any checkpoint's mean is loaded."""
        self.mean = mean
        self.start = mean.clone()
        self._mean_changed()

    @property
    def dimension(self) -> int:
        return int(self.mean.numel())

    def mean_vector(self) -> np.ndarray:
        return self.mean.numpy().astype(np.float64)  # (d,) a copy

    def noise_vector(self, seed: int) -> torch.Tensor:
        """The (d,) fp32 perturbation of member `seed`: each block's noise, concatenated."""
        return torch.cat([noise(shape, seed, name, self.noise_kind).view(-1) for name, shape in self.blocks])

    def _as_vector(self, vector: Any) -> torch.Tensor:
        vector = torch.as_tensor(np.asarray(vector), dtype=torch.float32).clone()
        if vector.shape != (self.dimension,):
            raise ConfigError(f"a point of this space has {self.dimension} numbers, got shape {tuple(vector.shape)}: "
                              "it was made for another adapter (rank, target modules or alpha).")
        return vector

    @torch.no_grad()
    def _store(self, weights: list[torch.Tensor]) -> None:
        for factor, weight in zip(self.factors, weights):
            factor.weight.copy_(weight)  # copy_ casts to the live dtype and device once

    def _mean_changed(self) -> None:
        self._mean_weights = self._weights(self.mean)  # computed once per mean: restore() is exact
        self._store(self._mean_weights)

    def _point(self, candidate: Member) -> torch.Tensor:
        """A Candidate (OpenES) is relative to the mean; a numpy vector (CMA-ES) is an absolute point."""
        if isinstance(candidate, Candidate):
            return self.noise_vector(candidate.seed).mul_(candidate.scale).add_(self.mean)  # mean + scale * eps
        return self._as_vector(candidate)

    def apply(self, candidate: Member) -> None:
        self._store(self._weights(self._point(candidate)))

    def candidate_factors(self, candidates: Sequence[Member]) -> list[torch.Tensor]:
        """Per factor (self.factors order), every candidate's matrix stacked: (pop, *factor.weight.shape).

        For population-batched generation (backends/multi_lora.py): the same fp32/float64 math as
        apply(), cast once to the live dtype and device, so row c equals what apply(candidates[c])
        would write, bit for bit. The live adapter is not touched.
        """
        weights = [self._weights(self._point(candidate)) for candidate in candidates]  # [pop][factor]
        return [torch.stack([per_candidate[index].to(factor.weight.device, factor.weight.dtype)
                             for per_candidate in weights])
                for index, factor in enumerate(self.factors)]

    def restore(self) -> None:
        self._store(self._mean_weights)

    def set_mean(self, vector: np.ndarray) -> None:
        """For strategies that own the mean (CMA-ES): adopt it after tell()."""
        self.mean = self._as_vector(vector)
        self._mean_changed()

    def step(self, seeds: list[int], coefficients: list[float]) -> None:
        gradient = torch.zeros(self.dimension, dtype=torch.float32)  # (d,)
        for seed, coefficient in zip(seeds, coefficients):
            if coefficient != 0.0:
                gradient.add_(self.noise_vector(seed), alpha=float(coefficient))
        optimizer = self.require_optimizer()
        optimizer.begin_step()
        self.mean = self.mean + optimizer.step("vector", gradient, self.mean)  # step may reuse `gradient`
        if fraction := optimizer.anchor_fraction():  # anchored weight decay, toward the starting adapter
            self.mean.lerp_(self.start, fraction)
        self._mean_changed()

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {"vector": self.mean.clone()}

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        if "vector" not in tensors:
            raise ConfigError("checkpoint lacks the adapter space's 'vector': it was written for another space; "
                              "resume with the same config.")
        self.mean = self._as_vector(tensors["vector"].to(torch.float32))
        self._mean_changed()

    def searched_values(self, vector: torch.Tensor) -> torch.Tensor:
        """(d,) float64: what the search moves at `vector`, in its own units (here the LoRA entries)."""
        return vector.to(torch.float64)

    def _base_weight_squares(self) -> float | None:
        """Sum of the squares of the adapted modules' base weights (once); None on a quantized base."""
        if self._base_squares is None:
            weights = [self.model.get_submodule(f.module).get_base_layer().weight for f in self.factors[::2]]
            if not all(weight.is_floating_point() for weight in weights):
                return None  # bitsandbytes' packed INT8/INT4 storage: no plain W0 to measure against
            self._base_squares = math.fsum(sum_of_squares(weight.detach()) for weight in weights)
        return self._base_squares

    @torch.no_grad()
    def drift_metrics(self) -> dict[str, float]:
        """drift/ metrics of the adapter against its start (spaces/drift.py)."""
        # every sum through sum_of_squares: the same bits whatever the thread count (a Ray worker has fewer)
        record = {"drift/l2": math.sqrt(sum_of_squares(self.mean - self.start))}
        values, start_values = self.searched_values(self.mean), self.searched_values(self.start)
        if (relative := ratio(sum_of_squares(values - start_values), sum_of_squares(start_values))) is not None:
            record["drift/relative_l2"] = relative
        base_squares = self._base_weight_squares()
        if base_squares:
            current, start = self._weights(self.mean), self._weights(self.start)
            change = total = 0.0
            for index in range(0, len(self.factors), 2):  # factors come in pairs: A (r, in) then B (out, r)
                scaling = float(self.model.get_submodule(self.factors[index].module).scaling[self.adapter])
                a, b, a0, b0 = current[index], current[index + 1], start[index], start[index + 1]
                total += scaling ** 2 * factor_product_squares(b, a)
                # B A - B0 A0 = [B, -B0] @ [A; A0]: rank 2r, still no (out, in) matrix
                change += scaling ** 2 * factor_product_squares(torch.cat([b, -b0], 1), torch.cat([a, a0], 0))
            record["drift/merged_relative_l2"] = math.sqrt(change / base_squares)
            record["drift/adapter_relative_l2"] = math.sqrt(total / base_squares)
        return record

    def adapter_weights(self) -> dict[str, torch.Tensor]:
        """The live A, B matrices on the host, keyed like PEFT's adapter state dict."""
        return {factor.state_key: factor.weight.detach().to("cpu", copy=True) for factor in self.factors}

    def save_adapter(self, directory: str) -> None:
        """Write the mean as a standard PEFT adapter (PeftModel.from_pretrained reloads it)."""
        self.restore()
        self.model.save_pretrained(directory, selected_adapters=[self.adapter])

    def save_pretrained(self, directory: str, backend: ModelWriter) -> None:
        """A standard PEFT adapter plus the tokenizer; `evotune export --merge` folds it into the base."""
        self.save_adapter(directory)
        backend.tokenizer.save_pretrained(directory)


class LoRASpace(AdapterSpace):
    """Every entry of every lora_A / lora_B matrix: the vector is their concatenation
    (sorted module names, A (r, in) then B (out, r), row-major)."""

    @classmethod
    def from_config(cls, config: Any, backend: Any, optimizer: Optimizer) -> LoRASpace:
        """Every entry of the run's adapter (registry entry `lora`); `backend.model` becomes the PEFT model."""
        backend.model = attach_adapter(backend.model, config)
        return cls(backend.model, noise_kind=config.noise, optimizer=optimizer)

    def __init__(self, model: torch.nn.Module, noise_kind: str = "gaussian", adapter: str = "default",
                 optimizer: Optimizer | None = None):
        super().__init__(model, adapter, noise_kind, optimizer)
        self.blocks = [(f"lora/{f.module}/{f.factor}", tuple(f.weight.shape)) for f in self.factors]
        self._begin(torch.cat([f.weight.detach().to("cpu", torch.float32).reshape(-1) for f in self.factors]))

    def _weights(self, vector: torch.Tensor) -> list[torch.Tensor]:
        sizes = [int(np.prod(shape)) for _, shape in self.blocks]
        return [piece.view(shape) for piece, (_, shape) in zip(torch.split(vector, sizes), self.blocks)]

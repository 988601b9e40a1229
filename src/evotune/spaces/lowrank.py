"""Low-rank perturbations of a full-parameter mean: EGGROLL.

EGGROLL (Sarkar et al., "Evolution Strategies at the Hyperscale", arXiv 2511.16652; code
ESHyperscale/HyperscaleES) gives every population member a rank-r perturbation of each weight
matrix W (out, in):

    E_i = A_i B_i^T / sqrt(r),   A_i (out, r), B_i (in, r), regenerated from the member's seed,

so the members of a population differ from the shared mean only by small factors. A batch row of
member i computes x W^T + scale_i (x B_i) A_i^T / sqrt(r): the base matmul is shared by the
whole population, which then runs as one batched forward (backends/multi_lora.py,
`population_linear_deltas`), exactly like the rows of a multi-LoRA batch. The update
sum_i c_i E_i is full rank and goes into the full-parameter fp32 mean, as in ES at Scale
(Qiu et al. 2025, arXiv 2509.24372); this space is FullParameterSpace with another noise.

What is perturbed: the weight of every `torch.nn.Linear` module (2-D, (out, in)) whose parameter
name passes `parameters` / `exclude_parameters`, except a weight shared with an embedding (a tied
LM head). Embeddings, norm weights and biases stay fixed: they are neither perturbed nor updated,
so the one-at-a-time and the batched evaluation see the same model.

Noise: A_i and B_i of parameter `name` are `noise((out, r), seed, "lowrank/<name>/A")` and
`noise((in, r), seed, "lowrank/<name>/B")` (gaussian or rademacher, `noise_kind`), pure functions
of (member seed, parameter name), so every entry of E_i has unit variance for either kind and any
r, and `sigma` means what it means for `space: full`. Antithetic pairs share the seed, so they share
A_i, B_i with opposite signs.

Exactness (the same contract as FullParameterSpace): apply(candidate) writes
cast(master + scale * A B^T / sqrt(r)) from the fp32 master, restore() writes cast(master), and
step() accumulates sum_k c_k A_k B_k^T / sqrt(r) in fp32 as one (out, K r) @ (K r, in) matmul per
tensor (never K dense matrices) into the master, which it then writes once. apply() is the dense
oracle the batched path is tested against, and what a Ray actor evaluates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import ConfigError
from ..optimizers import Optimizer
from ..types import Candidate, Member
from .base import FactoredSpace
from .full import FullParameterSpace, select_parameters
from .noise import noise
from .shards import Shard


@dataclass(frozen=True)
class LowRankFactor:
    """One factor of one perturbed Linear module, in LoRA's layout: a member's perturbation of the
    module's weight is factor B (out, r) @ factor A (r, in), as PEFT's lora_B @ lora_A with scaling 1."""

    module: str  # module name in the model, e.g. "model.layers.0.self_attn.q_proj"
    factor: str  # "A" ((r, in): scale / sqrt(r) * B_i^T) or "B" ((out, r): A_i)
    shape: tuple[int, ...]

    @property
    def state_key(self) -> str:
        """The key of this factor in a PEFT adapter state dict (for serving a member as a LoRA request)."""
        return f"base_model.model.{self.module}.lora_{self.factor}.weight"


def linear_weights(model: torch.nn.Module) -> list[tuple[str, str, torch.nn.Parameter]]:
    """(module name, parameter name, weight) of every nn.Linear whose weight is not an embedding's (tied)."""
    embeddings = {id(module.weight) for module in model.modules() if isinstance(module, torch.nn.Embedding)}
    found, seen = [], set()
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and id(module.weight) not in embeddings | seen:
            seen.add(id(module.weight))
            found.append((name, f"{name}.weight" if name else "weight", module.weight))
    return found


def _check(member: Member) -> Candidate:
    if not isinstance(member, Candidate):
        raise ConfigError("`space: lowrank` takes seed candidates (`strategy: openes`), not vectors.")
    return member


class LowRankNoise:
    """The members' factors, from parameter names and shapes alone (no weights): what the space uses, and
    what a process that holds no weights (a vLLM engine's driver) needs to serve members as LoRA requests.

    shapes: {parameter name "<module>.weight": (out, in)}, in module order.
    """

    def __init__(self, shapes: dict[str, tuple[int, int]], rank: int, noise_kind: str = "gaussian"):
        if rank < 1:
            raise ConfigError(f"`perturbation_rank` is {rank}; it must be a positive integer (EGGROLL uses 1).")
        self.shapes = {name: (int(shape[0]), int(shape[1])) for name, shape in shapes.items()}
        smallest = min(self.shapes.items(), key=lambda item: min(item[1]), default=None)
        if smallest is not None and rank > min(smallest[1]):
            name, (rows, columns) = smallest
            raise ConfigError(f"`perturbation_rank` is {rank}, above the rank of the {rows} x {columns} matrix {name} "
                              f"(at most {min(rows, columns)}); set perturbation_rank to {min(rows, columns)} or less, "
                              "or leave that matrix out with `exclude_parameters`.")
        self.rank = rank
        self.noise_kind = noise_kind
        # (module name, parameter name) per perturbed weight; its factors A (r, in) then B (out, r), LoRA's layout
        self.modules = [(name[:-len(".weight")] if name.endswith(".weight") else name, name) for name in self.shapes]
        self.factors = [LowRankFactor(module, kind, shape)
                        for module, name in self.modules
                        for kind, shape in (("A", (rank, self.shapes[name][1])), ("B", (self.shapes[name][0], rank)))]

    def factor_noise(self, seed: int, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(A (out, r), B (in, r)), fp32 on the host: member `seed`'s factors for parameter `name`."""
        out_features, in_features = self.shapes[name]
        return (noise((out_features, self.rank), seed, f"lowrank/{name}/A", self.noise_kind),
                noise((in_features, self.rank), seed, f"lowrank/{name}/B", self.noise_kind))

    def perturbation(self, candidate: Candidate, name: str) -> torch.Tensor:
        """The dense (out, in) fp32 perturbation scale * A B^T / sqrt(r) of `name` (tests, the dense path)."""
        a, b = self.factor_noise(candidate.seed, name)
        return torch.mm(a, b.T).mul_(candidate.scale / math.sqrt(self.rank))

    def candidate_factors(self, candidates: Sequence[Member], device: torch.device | str = "cpu") -> list[torch.Tensor]:
        """Per factor (self.factors order), every candidate's matrix stacked, fp32 on `device`:
        A: (P, r, in) = scale / sqrt(r) * B_i^T, B: (P, out, r) = A_i. Member c's perturbation of a
        module's weight is B[c] @ A[c], what apply(candidates[c]) adds to the master (up to rounding)."""
        per_seed: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # antithetic pairs draw once
        stacks: list[torch.Tensor] = []
        checked = [_check(candidate) for candidate in candidates]
        for _, name in self.modules:
            lora_a, lora_b = [], []
            for candidate in checked:
                if candidate.seed not in per_seed:
                    per_seed[candidate.seed] = self.factor_noise(candidate.seed, name)
                a, b = per_seed[candidate.seed]
                lora_a.append(b.T * (candidate.scale / math.sqrt(self.rank)))  # (r, in)
                lora_b.append(a)  # (out, r)
            stacks.append(torch.stack(lora_a).to(device))
            stacks.append(torch.stack(lora_b).to(device))
            per_seed.clear()  # keep one tensor's noise in memory, not the model's
        return stacks


class LowRankSpace(FullParameterSpace, FactoredSpace):
    """The full-parameter mean of the selected Linear weights, explored by rank-`rank` perturbations.

    named_tensors: (parameter name, weight) pairs to use instead of the model's Linear weights (e.g. the
    HF-named views into a vLLM engine's fused weights; each must be a Linear weight (out, in)).
    """
    population_batching = "whole"  # the point of low-rank members: the whole population in one batch

    @classmethod
    def from_config(cls, config: Any, backend: Any, optimizer: Optimizer) -> LowRankSpace:
        """EGGROLL's rank-r members of a full-parameter mean (registry entry `lowrank` on the hf backend)."""
        space = cls(backend.model, config.perturbation_rank, config.parameters or None,
                    config.exclude_parameters or None, noise_kind=config.noise, optimizer=optimizer,
                    keep_base=config.log_drift)
        space.place_master_for(config.master_device)
        return space

    def __init__(self, model: torch.nn.Module | None, rank: int = 1, include: list[str] | None = None,
                 exclude: list[str] | None = None, noise_kind: str = "gaussian", optimizer: Optimizer | None = None,
                 named_tensors: list[tuple[str, torch.Tensor]] | None = None, keep_base: bool = False,
                 shards: dict[str, Shard] | None = None):
        """shards: for weights that are one tensor-parallel rank's slice of a larger weight (a vLLM engine's,
        backends/vllm_weights.py), where the slice sits. The members' factors are drawn at the whole weight's
        shape, as on one rank, and each rank keeps the rows of A (a slice of rows) or of B (a slice of columns)
        its slice covers, so its part of A B^T is exactly the matching part of the whole perturbation and update."""
        if rank < 1:
            raise ConfigError(f"`perturbation_rank` is {rank}; it must be a positive integer (EGGROLL uses 1).")
        weights = named_tensors if named_tensors is not None else [(p, w) for _, p, w in linear_weights(model)]
        if not weights:
            raise ConfigError("`space: lowrank` perturbs the weights of torch.nn.Linear modules and this model has "
                              "none; use `space: full`.")
        selected = {name for name, _ in select_parameters(None, include, exclude, weights)}
        shards = {name: shard for name, shard in (shards or {}).items() if name in selected}
        super().__init__(model, named_tensors=[(p, w) for p, w in weights if p in selected],
                         noise_kind=noise_kind, optimizer=optimizer, keep_base=keep_base, shards=shards)
        whole = {name: self.shards[name].global_shape if name in self.shards else tuple(param.shape)
                 for name, param in self.parameters}
        self.noise = LowRankNoise(whole, rank, noise_kind)
        self.rank = rank
        self.modules = self.noise.modules
        self.factors = self.noise.factors

    def factor_noise(self, seed: int, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(A (out, r), B (in, r)), fp32 on the host: member `seed`'s factors for parameter `name`; for a shard,
        the rows of A (a row slice) or of B (a column slice) it holds: (local out, r) or (local in, r)."""
        a, b = self.noise.factor_noise(seed, name)
        shard = self.shards.get(name)
        if shard is None:
            return a, b
        local = self.master[name].shape[shard.dim]
        if shard.dim == 0:
            return a[shard.start:shard.start + local], b
        return a, b[shard.start:shard.start + local]

    def perturbation(self, candidate: Candidate, name: str) -> torch.Tensor:
        """The dense fp32 perturbation scale * A B^T / sqrt(r) of `name`, at its local shape (tests, the dense
        path)."""
        a, b = self.factor_noise(candidate.seed, name)
        return torch.mm(a, b.T).mul_(candidate.scale / math.sqrt(self.rank))

    def apply(self, candidate: Member) -> None:
        candidate = _check(candidate)
        alpha = candidate.scale / math.sqrt(self.rank)

        def perturb(name: str, param: torch.nn.Parameter) -> None:
            master = self.master[name]
            a, b = (factor.to(master.device) for factor in self.factor_noise(candidate.seed, name))
            # master + scale * A B^T / sqrt(r) in fp32 where the master lives, cast once into the live dtype. Not
            # one addmm: its fused scale-and-add rounds a row slice differently from the whole matrix (1 ulp, seen
            # on CPU), and a tensor-parallel rank's slice must get exactly the whole weight's bits
            param.copy_(torch.mm(a, b.T).mul_(alpha).add_(master))
        self._for_each(perturb)

    def candidate_factors(self, candidates: Sequence[Member]) -> list[torch.Tensor]:
        """Per factor (self.factors order), every candidate's matrix stacked, fp32 on the weights' device
        (see LowRankNoise.candidate_factors): the rows of one batched forward (backends/multi_lora.py). Whole
        weights only: a tensor-parallel engine serves members as LoRA requests, which it shards itself."""
        if self.shards:
            raise ConfigError("batched low-rank members need whole weights, not tensor-parallel shards: the "
                              "engine serves them as LoRA requests.")
        return self.noise.candidate_factors(candidates, self.parameters[0][1].device)

    def step(self, seeds: list[int], coefficients: list[float]) -> None:
        optimizer = self.require_optimizer()
        optimizer.begin_step()
        fraction = self.checked_anchor_fraction(optimizer)
        terms = [(seed, float(c)) for seed, c in zip(seeds, coefficients) if float(c) != 0.0]
        scale = 1.0 / math.sqrt(self.rank)

        def step(name: str, param: torch.nn.Parameter) -> None:
            master = self.master[name]
            if terms:
                factors = [self.factor_noise(seed, name) for seed, _ in terms]
                # sum_k c_k A_k B_k^T / sqrt(r) = (A_cat diag(c)) B_cat^T / sqrt(r): (out, K r) @ (K r, in), fp32
                a_cat = torch.cat([a * c for (a, _), (_, c) in zip(factors, terms)], dim=1).to(master.device)
                b_cat = torch.cat([b for _, b in factors], dim=1).to(master.device)
                gradient = torch.mm(a_cat, b_cat.T).mul_(scale)
            else:
                gradient = torch.zeros_like(master)
            master.add_(optimizer.step(name, gradient, master))
            if fraction:  # anchored weight decay: mean <- mean + fraction * (base - mean), in fp32
                master.lerp_(self.base[name].to(master.device, torch.float32), fraction)
            param.copy_(master)
        self._for_each(step)

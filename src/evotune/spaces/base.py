"""The search-space contract.

A space turns a population member into weights and back, and owns the mean and the
optimizer that moves it. Strategies see only members (seeds with a signed scale, or small
vectors) and emit updates (seeds and coefficients, or a new mean vector); how either becomes
weights is the space's business, as pycma's GenoPheno hides the phenotype.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import numpy as np
import torch

from ..errors import ConfigError
from ..optimizers import Optimizer
from ..types import MeanUpdate, Member, SeedUpdate, Update, update_from_dict


def differing_tensors(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> list[str]:
    """Names held by only one of two state dicts, then names whose tensors are not bit-identical: how a replay
    of an update log is checked against the mean it must reach (`evotune doctor`, `export --average-last`)."""
    return sorted(set(first) ^ set(second)) + [name for name in first if name in second
                                                and not torch.equal(first[name].cpu(), second[name].cpu())]

class ModelWriter(Protocol):
    """What `save_pretrained` needs of a backend (spaces sit above no backend: any object with these works)."""

    tokenizer: Any  # a transformers tokenizer

    def save_pretrained(self, directory: str) -> None:
        """Write the current model and tokenizer."""


class Space(ABC):
    """apply(member) perturbs the weights in place; restore() returns to the mean exactly;
    apply_update(update) moves the mean (through `optimizer` for seed updates)."""

    optimizer: Optimizer | None = None
    # How a population of this space may be evaluated in one batched forward (the backend decides the number,
    # Backend.population_batch): "none" one candidate at a time; "requested" when `population_batch_size` asks for
    # it (or the backend batches by default); "whole" the whole population by default.
    population_batching = "none"

    @abstractmethod
    def apply(self, member: Member) -> None:
        """Write mean + member's perturbation (or the member's absolute point) into the live weights."""

    @abstractmethod
    def restore(self) -> None:
        """Write the mean back, bit-identical to before any apply()."""

    def prefetch(self, member: Member | None) -> None:  # noqa: B027 - optional hook, a no-op by default
        """A hint: the next call is apply(member) (None: restore()). A space that can prepare it in the
        background (FullParameterSpace with prefetch) starts now; by default nothing happens."""

    @abstractmethod
    def step(self, seeds: list[int], coefficients: list[float]) -> None:
        """Move the mean by optimizer(sum_k coefficients[k] * noise(seeds[k])); write the live weights."""

    def require_optimizer(self) -> Optimizer:
        """The optimizer a seed update steps with (spaces built for CMA-ES alone may have none)."""
        if self.optimizer is None:
            raise ConfigError(f"{type(self).__name__} was built without an optimizer, so it cannot take a seed "
                              "update; pass optimizer=SGD(learning_rate) (or evotune.optimizers.make_optimizer).")
        return self.optimizer

    def set_mean(self, vector: np.ndarray) -> None:
        """Adopt an absolute mean (d,): for strategies that own their mean (CMA-ES)."""
        raise ConfigError(f"{type(self).__name__} has no small mean vector for `strategy: cma` to move; use "
                          "`strategy: openes`, or a vector space (`space: svd_lora` or `lora`) for CMA-ES.")

    def apply_update(self, update: Update) -> None:
        """The one way a mean moves: a strategy's update here, the same update on every replica, or replay."""
        if isinstance(update, MeanUpdate):
            self.set_mean(np.asarray(update.mean, dtype=np.float64))
        elif isinstance(update, SeedUpdate):
            self.step(update.seeds, update.coefficients)
        else:
            raise TypeError(f"not an update: {update!r}")

    def replay(self, update_log: list[dict]) -> None:
        """Re-apply logged updates (update_to_dict entries, in order) from the current mean."""
        for entry in update_log:
            self.apply_update(update_from_dict(entry))

    @abstractmethod
    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The exact mean (saved in checkpoints)."""

    @abstractmethod
    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        """Inverse of state_tensors(); also writes the live weights."""

    def state_dict(self) -> dict[str, Any]:
        """Small JSON state besides the mean: the optimizer's counters."""
        return {"optimizer": self.optimizer.state_dict()} if self.optimizer is not None else {}

    def optimizer_tensors(self) -> dict[str, torch.Tensor]:
        """The optimizer's per-weight state (Adam's moments; nothing for SGD)."""
        return dict(self.optimizer.tensors()) if self.optimizer is not None else {}

    def load_state_dict(self, state: dict[str, Any], optimizer_tensors: dict[str, torch.Tensor]) -> None:
        """Inverse of state_dict() and optimizer_tensors()."""
        if self.optimizer is not None and "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"], optimizer_tensors)

    def mean_is_finite(self) -> bool:
        """False if any number of the mean is NaN or infinite (a diverged update).

        A NaN or an infinity makes a tensor's sum non-finite, so a finite sum proves the tensor finite in
        one pass without a (numel,) bool tensor; only a non-finite sum (or an overflow) is checked element
        by element."""
        return all(bool(torch.isfinite(tensor.sum())) or bool(torch.isfinite(tensor).all())
                   for tensor in self.mean_tensors())

    def mean_tensors(self) -> Iterable[torch.Tensor]:
        """The mean's tensors where they live, for checks on them (mean_is_finite): state_tensors() by default."""
        return self.state_tensors().values()

    def drift_metrics(self) -> dict[str, float]:
        """How far the mean is from where it started, as `drift/<name>` numbers (spaces/drift.py): computed
        where the mean lives, logged at every evaluation. {} for a space that keeps no starting point."""
        return {}

    def checksum(self) -> str:
        """A hash of the exact mean and optimizer state (every tensor's bytes, in name order): replicas
        that applied the same updates agree bit for bit."""
        digest = hashlib.blake2b(digest_size=16)
        tensors = {**self.state_tensors(), **{f"optimizer/{k}": v for k, v in self.optimizer_tensors().items()}}
        for name, tensor in sorted(tensors.items()):
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
        return digest.hexdigest()

    def noise_fingerprint(self) -> str:
        """Equal on two replicas iff they draw the same noise for the same seed (spaces/noise.py,
        noise_fingerprint). Spaces that draw their noise on the CPU (numpy or torch's CPU generator) agree
        everywhere; FullParameterSpace draws on the weights' device and says so."""
        return "cpu"

    def save_pretrained(self, directory: str, backend: ModelWriter) -> None:
        """Write the mean where `from_pretrained` finds it: by default the backend's model (which holds
        the mean after restore()) with its tokenizer. Adapter spaces write a PEFT adapter instead."""
        self.restore()
        backend.save_pretrained(directory)


class FactoredSpace(Space):
    """A space whose members are low-rank factors a backend can batch (`population_batch_size`, vLLM LoRA
    requests): the adapter spaces (each member is a whole LoRA adapter) and `lowrank` (each member is a
    rank-r perturbation of the Linear weights). A backend runs P members in one forward from
    `factors` and `candidate_factors(members)`, without writing any member into the live weights."""

    factors: Sequence[Any]  # LoRAFactor (a PEFT adapter's live matrices) or LowRankFactor (a plain Linear's)

    @abstractmethod
    def candidate_factors(self, candidates: Sequence[Member]) -> list[torch.Tensor]:
        """Per factor, every member's matrix stacked: (P, *factor shape), in `factors`' order."""

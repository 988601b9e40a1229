"""The search-space contract.

A space turns a candidate into weights and back. Strategies see only candidates
(seeds with a signed scale, or small vectors); how a candidate becomes weights
is the space's business, as pycma's GenoPheno hides the phenotype.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch


class Space(ABC):
    """apply(candidate) perturbs the weights in place; restore() returns to the mean exactly."""

    @abstractmethod
    def apply(self, candidate: Any) -> None:
        """Write mean + candidate's perturbation into the live weights."""

    @abstractmethod
    def restore(self) -> None:
        """Write the mean back, bit-identical to before any apply()."""

    @abstractmethod
    def update(self, seeds: list[int], coefficients: list[float], optimizer: Any) -> None:
        """Move the mean by optimizer(sum_k coefficients[k] * noise(seeds[k]))."""

    @abstractmethod
    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Everything needed to rebuild the mean exactly (saved in checkpoints)."""

    @abstractmethod
    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        """Inverse of state_tensors(); also writes the live weights."""

    def replay(self, update_log: list[dict], optimizer: Any) -> None:
        """Re-apply logged updates ({"seeds", "coefficients"} per iteration) from the current mean."""
        for entry in update_log:
            self.update(entry["seeds"], entry["coefficients"], optimizer)

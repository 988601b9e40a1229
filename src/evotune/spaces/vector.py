"""A plain parameter vector as a search space (toy problems, conformance tests).

The same seed-to-noise function as the model spaces, on one tensor named "vector",
so a strategy tested here behaves identically on a model.
"""

from __future__ import annotations

import numpy as np
import torch

from ..optimizers import Optimizer
from ..types import Member
from .base import Space
from .noise import noise


class VectorSpace(Space):
    """A flat fp32 vector (d,) with the model spaces' noise and exact restore: toy objectives and tests."""

    def __init__(self, initial: np.ndarray, noise_kind: str = "gaussian", optimizer: Optimizer | None = None):
        self.mean = torch.as_tensor(np.asarray(initial, dtype=np.float32)).clone()  # (d,)
        self.start = self.mean.clone()  # what anchored weight decay pulls toward
        self.current = self.mean.clone()  # what an objective sees: mean or mean + perturbation
        self.noise_kind = noise_kind
        self.optimizer = optimizer

    def apply(self, candidate: Member) -> None:
        """A seed candidate (OpenES) is relative to the mean; a vector (CMA-ES) is an absolute point."""
        if isinstance(candidate, np.ndarray):
            self.current = torch.as_tensor(candidate, dtype=torch.float32)
            return
        eps = noise(self.mean.shape, candidate.seed, "vector", self.noise_kind)
        self.current = self.mean + candidate.scale * eps

    def set_mean(self, vector: np.ndarray) -> None:
        """For strategies that own the mean (CMA-ES): adopt it after tell()."""
        self.mean = torch.as_tensor(np.asarray(vector), dtype=torch.float32).clone()
        self.current = self.mean.clone()

    def restore(self) -> None:
        self.current = self.mean.clone()

    def step(self, seeds: list[int], coefficients: list[float]) -> None:
        gradient = torch.zeros_like(self.mean)
        for seed, coefficient in zip(seeds, coefficients):
            gradient.add_(noise(self.mean.shape, seed, "vector", self.noise_kind), alpha=coefficient)
        optimizer = self.require_optimizer()
        optimizer.begin_step()
        self.mean = self.mean + optimizer.step("vector", gradient, self.mean)
        if fraction := optimizer.anchor_fraction():  # anchored weight decay (optimizers/rules.py)
            self.mean.lerp_(self.start, fraction)
        self.current = self.mean.clone()

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {"vector": self.mean.clone()}

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        self.mean = tensors["vector"].clone()
        self.current = self.mean.clone()

"""Ask/tell bookkeeping shared by every strategy.

As in evosax, the base class owns what is the same for every method: validating
rewards, fitness shaping, counters, best-so-far and per-iteration metrics, and
state save/load. A strategy writes only its own `_ask` and `_tell` math.
Rewards are higher-is-better everywhere (the CMA-ES adapter alone flips the sign).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from .shaping import SHAPINGS


@dataclass(frozen=True)
class Candidate:
    """One population member of a seed-based strategy: perturbation = scale * noise(seed)."""

    seed: int
    scale: float


@dataclass(frozen=True)
class Update:
    """A step described by seeds: gradient estimate = sum_k coefficients[k] * noise(seeds[k])."""

    seeds: list[int]
    coefficients: list[float]


class Strategy(ABC):
    """ask() -> candidates; tell(rewards) -> Update. Hyperparameters are constructor
    arguments; evolving state is what state_dict() returns."""

    def __init__(self, population_size: int, fitness_shaping: str = "z_score", seed: int = 0):
        if population_size < 2:
            raise ValueError("population_size must be at least 2 (ES compares members against each other)")
        self.population_size = population_size
        self.shape = SHAPINGS[fitness_shaping]
        self.seed = seed
        self.iteration = 0
        self.best_reward = -np.inf
        self.best_iteration = -1
        self._pending: list | None = None

    def ask(self) -> list:
        self._pending = self._ask()
        return self._pending

    def tell(self, rewards: np.ndarray | list[float]) -> tuple[Update | None, dict[str, float]]:
        """Consume the population's rewards; return the update (if any) and metrics."""
        if self._pending is None:
            raise RuntimeError("tell() called without a matching ask()")
        rewards = np.asarray(rewards, dtype=np.float64)
        if rewards.shape != (len(self._pending),):
            raise ValueError(f"expected {len(self._pending)} rewards, got shape {rewards.shape}")
        if np.isnan(rewards).all():
            raise ValueError("every candidate's reward is NaN (all samples skipped); nothing to learn from")
        # A candidate whose samples were all skipped is neutral: it gets the population mean.
        rewards = np.where(np.isnan(rewards), np.nanmean(rewards), rewards)
        metrics = {"reward_mean": float(rewards.mean()), "reward_std": float(rewards.std()),
                   "reward_max": float(rewards.max()), "reward_min": float(rewards.min())}
        if rewards.max() > self.best_reward:
            self.best_reward, self.best_iteration = float(rewards.max()), self.iteration
        update = self._tell(self.shape(rewards), rewards)
        self._pending = None
        self.iteration += 1
        return update, metrics

    @abstractmethod
    def _ask(self) -> list:
        """The population of the current iteration, a pure function of (seed, state)."""

    @abstractmethod
    def _tell(self, shaped: np.ndarray, rewards: np.ndarray) -> Update | None:
        """The method's own math on shaped fitness (pop,)."""

    def state_dict(self) -> dict[str, Any]:
        return {"iteration": self.iteration, "best_reward": self.best_reward,
                "best_iteration": self.best_iteration}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iteration = int(state["iteration"])
        self.best_reward = float(state["best_reward"])
        self.best_iteration = int(state["best_iteration"])
        self._pending = None

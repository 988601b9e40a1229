"""Ask/tell bookkeeping shared by every strategy.

As in evosax, the base class owns what is the same for every method: validating
rewards, fitness shaping, counters, best-so-far and per-iteration metrics, and
state save/load. A strategy writes only its own `_ask` and `_tell` math.
Rewards are higher-is-better everywhere (the CMA-ES adapter alone flips the sign).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from ..types import Population, Update
from .shaping import SHAPINGS, check_rewards


class Strategy(ABC):
    """ask() -> Population; tell(rewards) -> (Update, metrics). Hyperparameters are constructor
    arguments; evolving state is what state_dict() returns.

    The update says how the mean moves (a SeedUpdate of seeds and coefficients, or CMA-ES's new
    MeanUpdate); the space that holds the mean applies it with its optimizer, so a strategy never
    sees weights, and the same update can be replayed on any replica.
    """

    def __init__(self, population_size: int, fitness_shaping: str = "z_score", seed: int = 0):
        if population_size < 2:
            raise ValueError("population_size must be at least 2 (ES compares members against each other)")
        self.population_size = population_size
        self.shape = SHAPINGS[fitness_shaping]
        self.seed = seed
        self.iteration = 0
        self.best_reward = -np.inf
        self.best_iteration = -1
        self._pending: Population | None = None

    def ask(self) -> Population:
        self._pending = self._ask()
        return self._pending

    def tell(self, rewards: np.ndarray | list[float]) -> tuple[Update, dict[str, float]]:
        """Consume the population's rewards (pop,), higher is better; return the update and metrics."""
        if self._pending is None:
            raise RuntimeError("tell() called without a matching ask()")
        rewards = np.asarray(rewards, dtype=np.float64)
        if rewards.shape != (len(self._pending),):
            raise ValueError(f"expected {len(self._pending)} rewards, got shape {rewards.shape}")
        if np.isnan(rewards).all():
            raise ValueError("every candidate's reward is NaN (all samples skipped); nothing to learn from")
        # A candidate whose samples were all skipped is neutral: it gets the population mean.
        rewards = np.where(np.isnan(rewards), np.nanmean(rewards), rewards)
        check_rewards(rewards, self.iteration)  # inf, or a spread float64 cannot shape: refused by candidate
        metrics = {"reward_mean": float(rewards.mean()), "reward_std": float(rewards.std()),
                   "reward_max": float(rewards.max()), "reward_min": float(rewards.min())}
        if rewards.max() > self.best_reward:
            self.best_reward, self.best_iteration = float(rewards.max()), self.iteration
        update = self._tell(self.shape(rewards), rewards)
        metrics.update(self.search_metrics())
        self._pending = None
        self.iteration += 1
        return update, metrics

    def search_metrics(self) -> dict[str, float]:
        """The method's own state worth a curve (e.g. CMA-ES's adapted step size), logged each iteration."""
        return {}

    @abstractmethod
    def _ask(self) -> Population:
        """The population of the current iteration, a pure function of (seed, state)."""

    @abstractmethod
    def _tell(self, shaped: np.ndarray, rewards: np.ndarray) -> Update:
        """The method's own math on shaped fitness (pop,); the update carries `self.iteration`."""

    def state_dict(self) -> dict[str, Any]:
        return {"iteration": self.iteration, "best_reward": self.best_reward,
                "best_iteration": self.best_iteration}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iteration = int(state["iteration"])
        self.best_reward = float(state["best_reward"])
        self.best_iteration = int(state["best_iteration"])
        self._pending = None

"""OpenAI-style ES as in "Evolution Strategies at Scale" (Qiu et al. 2025, arXiv 2509.24372).

Members are integer seeds; the update is decomposed as
    mean += learning_rate * (1/N) * sum_n shaped_n * eps_n
with sigma folded into the learning rate (the paper's convention). The strategy emits the
SeedUpdate (seeds, coefficients = shaped_n / N); the space that holds the mean applies it
through its optimizer (SGD is the line above, Adam its adaptive variant), so no noise is ever
stored and the learning rate belongs to the optimizer, not to this class. Antithetic (mirrored)
sampling evaluates +eps and -eps from one seed; the paper lists it as future work.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..seeds import derive_seed
from ..types import Candidate, SeedUpdate
from .base import Strategy


class OpenES(Strategy):
    """ES at Scale's strategy: members are integer seeds (pairs of +/- seeds when `antithetic`), rewards are
    shaped (z-score by default), and `tell` emits the SeedUpdate the space applies through its optimizer."""

    @classmethod
    def from_config(cls, config: Any, space: Any) -> OpenES:
        """The run's OpenES (the registry entry `openes`): seeds and a mean the space holds."""
        return cls(config.population_size, config.sigma, config.antithetic, config.fitness_shaping, config.seed)

    def __init__(self, population_size: int = 30, sigma: float = 1e-3, antithetic: bool = False,
                 fitness_shaping: str = "z_score", seed: int = 0):
        super().__init__(population_size, fitness_shaping, seed)
        if sigma < 0:
            raise ValueError("sigma must be >= 0")
        if antithetic and population_size % 2:
            raise ValueError("antithetic sampling needs an even population_size")
        self.sigma = sigma
        self.antithetic = antithetic

    def member_seeds(self, iteration: int) -> list[int]:
        """The distinct noise seeds of an iteration: any worker can regenerate them."""
        count = self.population_size // 2 if self.antithetic else self.population_size
        return [derive_seed(self.seed, iteration, member) for member in range(count)]

    def _ask(self) -> list[Candidate]:
        seeds = self.member_seeds(self.iteration)
        if self.antithetic:  # [+s0, -s0, +s1, -s1, ...]
            return [Candidate(seed, sign * self.sigma) for seed in seeds for sign in (1.0, -1.0)]
        return [Candidate(seed, self.sigma) for seed in seeds]

    def _tell(self, shaped: np.ndarray, rewards: np.ndarray) -> SeedUpdate:
        seeds = self.member_seeds(self.iteration)
        if self.antithetic:  # a pair contributes (shaped+ - shaped-) * eps
            pairs = shaped.reshape(-1, 2)
            coefficients = (pairs[:, 0] - pairs[:, 1]) / self.population_size
        else:
            coefficients = shaped / self.population_size
        return SeedUpdate(self.iteration, seeds, [float(c) for c in coefficients])

"""OpenAI-style ES as in "Evolution Strategies at Scale" (Qiu et al. 2025, arXiv 2509.24372).

Members are integer seeds; the update is decomposed as
    mean += learning_rate * (1/N) * sum_n shaped_n * eps_n
with sigma folded into the learning rate (the paper's convention), applied by the
space from (seeds, coefficients) so no noise is ever stored. Antithetic (mirrored)
sampling evaluates +eps and -eps from one seed; the paper lists it as future work.
"""

from __future__ import annotations

import numpy as np

from ..spaces.noise import derive_seed
from .base import Candidate, Strategy, Update
from .optimizers import make_optimizer


class OpenES(Strategy):
    def __init__(self, population_size: int = 30, sigma: float = 1e-3, learning_rate: float = 5e-4,
                 antithetic: bool = False, fitness_shaping: str = "z_score", optimizer: str = "sgd",
                 weight_decay: float = 0.0, seed: int = 0):
        super().__init__(population_size, fitness_shaping, seed)
        if sigma < 0:
            raise ValueError("sigma must be >= 0")
        if antithetic and population_size % 2:
            raise ValueError("antithetic sampling needs an even population_size")
        self.sigma = sigma
        self.antithetic = antithetic
        self.optimizer = make_optimizer(optimizer, learning_rate, weight_decay)

    def member_seeds(self, iteration: int) -> list[int]:
        """The distinct noise seeds of an iteration: any worker can regenerate them."""
        count = self.population_size // 2 if self.antithetic else self.population_size
        return [derive_seed(self.seed, iteration, member) for member in range(count)]

    def _ask(self) -> list[Candidate]:
        seeds = self.member_seeds(self.iteration)
        if self.antithetic:  # [+s0, -s0, +s1, -s1, ...]
            return [Candidate(seed, sign * self.sigma) for seed in seeds for sign in (1.0, -1.0)]
        return [Candidate(seed, self.sigma) for seed in seeds]

    def _tell(self, shaped: np.ndarray, rewards: np.ndarray) -> Update:
        seeds = self.member_seeds(self.iteration)
        if self.antithetic:  # a pair contributes (shaped+ - shaped-) * eps
            pairs = shaped.reshape(-1, 2)
            coefficients = (pairs[:, 0] - pairs[:, 1]) / self.population_size
        else:
            coefficients = shaped / self.population_size
        return Update(seeds=seeds, coefficients=[float(c) for c in coefficients])

    def state_dict(self) -> dict:
        return {**super().state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.optimizer.load_state_dict(state["optimizer"])

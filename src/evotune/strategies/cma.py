"""CMA-ES through pycma (Hansen et al.), the search strategy of ESSA
(Korotyshova, Shaposhnikov et al., "ESSA: Evolutionary Strategies for Scalable Alignment").

Candidates are absolute points of a small vector space (e.g. singular-value offsets).
pycma minimizes, so rewards are negated here and nowhere else. The sampling noise of an
iteration comes from a generator seeded by (seed, iteration), so any worker holding the
same state regenerates the same population; the whole pycma object is the resumable state.
"""

from __future__ import annotations

import base64
import pickle

import numpy as np

from ..spaces.noise import derive_seed
from .base import Strategy


class SeededNormal:
    """pycma's `randn` option: standard normals from a generator re-seeded at every ask().

    A class, not a lambda, so the pycma object (which keeps its options) stays picklable.
    """

    def __init__(self, seed: int):
        self.seed = seed
        self.generator = np.random.default_rng(seed)

    def reseed(self, iteration: int) -> None:
        self.generator = np.random.default_rng(derive_seed(self.seed, "cma", iteration))

    def __call__(self, *shape: int) -> np.ndarray:
        return self.generator.standard_normal(shape)


class CMAES(Strategy):
    def __init__(self, population_size: int, sigma: float, dimension: int | None = None,
                 initial_mean: np.ndarray | None = None, diagonal: bool = False, seed: int = 0):
        super().__init__(population_size, "none", seed)  # CMA-ES ranks internally
        import cma

        if initial_mean is None:
            if not dimension:
                raise ValueError("CMAES needs `dimension` or `initial_mean`")
            initial_mean = np.zeros(dimension)
        self.sigma = sigma
        self.randn = SeededNormal(seed)
        options = {"popsize": population_size, "randn": self.randn, "verbose": -9,
                   "CMA_diagonal": diagonal, "tolfun": 0, "tolx": 0, "tolfunhist": 0, "tolstagnation": 10**9}
        self.es = cma.CMAEvolutionStrategy(np.asarray(initial_mean, dtype=np.float64), sigma, options)

    @property
    def mean(self) -> np.ndarray:
        return np.array(self.es.mean, dtype=np.float64)  # (d,)

    def _ask(self) -> list[np.ndarray]:
        self.randn.reseed(self.iteration)
        return [np.asarray(x) for x in self.es.ask()]  # pop x (d,)

    def _tell(self, shaped: np.ndarray, rewards: np.ndarray) -> None:
        self.es.tell(self._pending, (-rewards).tolist())  # pycma minimizes: the one sign flip
        return None

    def state_dict(self) -> dict:
        return {**super().state_dict(), "pycma": base64.b64encode(pickle.dumps(self.es)).decode()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.es = pickle.loads(base64.b64decode(state["pycma"]))
        # The sampler keeps its own reference to `randn`: point both at this strategy's generator.
        self.es.opts["randn"] = self.randn
        if hasattr(self.es.sm, "randn"):
            self.es.sm.randn = self.randn

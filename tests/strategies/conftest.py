"""Every registered strategy, on a quadratic, through one parametrized fixture (as evosax's tests/conftest.py).

`strategy_variant` is parametrized over VARIANTS: each registered strategy of
`evotune.strategies.STRATEGIES` at least once, plus the options that change its math. A strategy
registered without a variant still gets a case, whose every test fails with a message saying to add
one (and test_every_strategy_is_covered fails too).
"""

from __future__ import annotations

import numpy as np
import pytest

TARGET = np.linspace(-1.0, 1.0, 10)  # (10,) the optimum

# name: (registered strategy, its arguments, optimizer of the space's mean: name, learning rate, weight decay)
VARIANTS = {
    "openes": ("openes", dict(population_size=20, sigma=0.1), ("sgd", 0.05, 0.0)),
    "openes-antithetic": ("openes", dict(population_size=20, sigma=0.1, antithetic=True), ("sgd", 0.05, 0.0)),
    "openes-rank": ("openes", dict(population_size=20, sigma=0.1, fitness_shaping="centered_rank"),
                    ("sgd", 0.05, 0.0)),
    "openes-adam": ("openes", dict(population_size=20, sigma=0.1), ("adam", 0.05, 0.0)),
    "openes-weight-decay": ("openes", dict(population_size=20, sigma=0.1), ("sgd", 0.05, 0.01)),
    "cma": ("cma", dict(population_size=12, sigma=0.3, dimension=10), None),
    "cma-diagonal": ("cma", dict(population_size=12, sigma=0.3, dimension=10, diagonal=True), None),
}


def quadratic(x: np.ndarray) -> float:
    return -float(((x - TARGET) ** 2).sum())  # higher is better, max 0 at TARGET


class Quadratic:
    """Builds a variant's (strategy, VectorSpace at the origin) and runs ask -> evaluate -> tell -> apply_update."""

    reward = staticmethod(quadratic)

    def make(self, variant: str, seed: int):
        from evotune.optimizers import make_optimizer
        from evotune.spaces import VectorSpace
        from evotune.strategies import STRATEGIES

        if variant not in VARIANTS:
            pytest.fail(f"strategy {variant!r} is registered in evotune.strategies.STRATEGIES but tests/strategies/"
                        "conftest.py has no VARIANTS entry for it: add one, so the conformance tests run on it.")
        name, arguments, optimizer = VARIANTS[variant]
        strategy = STRATEGIES[name](seed=seed, **arguments)
        return strategy, VectorSpace(np.zeros(10), optimizer=make_optimizer(*optimizer) if optimizer else None)

    def run(self, strategy, space, iterations: int) -> list:
        """Per iteration: (seeds, coefficients) of a SeedUpdate, or the population of a MeanUpdate strategy."""
        from evotune.strategies import STRATEGIES
        from evotune.types import MeanUpdate, SeedUpdate

        history = []
        for _ in range(iterations):
            candidates = strategy.ask()
            rewards = []
            for candidate in candidates:
                space.apply(candidate)
                rewards.append(quadratic(space.current.numpy()))
            space.restore()
            update, _ = strategy.tell(rewards)
            assert isinstance(update, MeanUpdate if isinstance(strategy, STRATEGIES["cma"]) else SeedUpdate)
            space.apply_update(update)
            if isinstance(update, MeanUpdate):  # the strategy owns the mean (CMA-ES)
                history.append([c.copy() for c in candidates])
            else:
                history.append((update.seeds, update.coefficients))
        return history


def variant_names() -> list[str]:
    from evotune.strategies import STRATEGIES

    covered = {registered for registered, _, _ in VARIANTS.values()}
    return sorted(VARIANTS) + sorted(name for name in STRATEGIES if name not in covered)


@pytest.fixture(params=variant_names())
def strategy_variant(request) -> str:
    """THE fixture: one parametrization per variant of every registered strategy."""
    return request.param


@pytest.fixture
def variants() -> dict:
    return VARIANTS


@pytest.fixture
def on_quadratic() -> Quadratic:
    return Quadratic()

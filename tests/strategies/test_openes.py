"""evotune.strategies.openes: antithetic pairs, populations regenerated from seeds, sigma 0 and
learning rate 0 change nothing (invariant 6)."""

from __future__ import annotations

import numpy as np

from evotune.optimizers import make_optimizer
from evotune.spaces import VectorSpace
from evotune.strategies import OpenES


def test_learning_rate_zero_changes_nothing(on_quadratic):
    strategy = OpenES(population_size=8, sigma=0.1)
    space = VectorSpace(np.ones(10), optimizer=make_optimizer("sgd", 0.0))
    on_quadratic.run(strategy, space, 3)
    assert np.array_equal(space.mean.numpy(), np.ones(10, dtype=np.float32))


def test_sigma_zero_changes_nothing(on_quadratic):
    strategy = OpenES(population_size=8, sigma=0.0)
    space = VectorSpace(np.ones(10), optimizer=make_optimizer("sgd", 0.5))
    on_quadratic.run(strategy, space, 3)  # every candidate equals the mean: equal rewards, zero shaped fitness
    assert np.array_equal(space.mean.numpy(), np.ones(10, dtype=np.float32))


def test_antithetic_pairs_share_seeds_with_opposite_signs():
    strategy = OpenES(population_size=6, sigma=0.2, antithetic=True, seed=5)
    candidates = strategy.ask()
    assert [c.seed for c in candidates[0::2]] == [c.seed for c in candidates[1::2]]
    assert all(a.scale == -b.scale == 0.2 for a, b in zip(candidates[0::2], candidates[1::2]))
    assert len({c.seed for c in candidates}) == 3


def test_population_is_regenerated_from_seed_and_iteration():
    a, b = OpenES(population_size=4, seed=9), OpenES(population_size=4, seed=9)
    assert a.ask() == b.ask()
    assert a.ask() != OpenES(population_size=4, seed=10).ask()

"""Strategy conformance on a quadratic, shaping, and save -> step -> load round trips."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from evotune.optimizers import make_optimizer
from evotune.spaces import VectorSpace
from evotune.strategies import STRATEGIES, MeanUpdate, OpenES, SeedUpdate, centered_rank, z_score

TARGET = np.linspace(-1.0, 1.0, 10)


def quadratic(x: np.ndarray) -> float:
    return -float(((x - TARGET) ** 2).sum())  # higher is better, max 0 at TARGET


# (strategy arguments, optimizer of the space's mean: name, learning rate, weight decay)
VARIANTS = {
    "openes": (dict(population_size=20, sigma=0.1), ("sgd", 0.05, 0.0)),
    "openes-antithetic": (dict(population_size=20, sigma=0.1, antithetic=True), ("sgd", 0.05, 0.0)),
    "openes-rank": (dict(population_size=20, sigma=0.1, fitness_shaping="centered_rank"), ("sgd", 0.05, 0.0)),
    "openes-adam": (dict(population_size=20, sigma=0.1), ("adam", 0.05, 0.0)),
    "openes-weight-decay": (dict(population_size=20, sigma=0.1), ("sgd", 0.05, 0.01)),
    "cma": (dict(population_size=12, sigma=0.3, dimension=10), None),
    "cma-diagonal": (dict(population_size=12, sigma=0.3, dimension=10, diagonal=True), None),
}


def make(variant: str, seed: int):
    """(strategy, VectorSpace at the origin with the variant's optimizer)."""
    arguments, optimizer = VARIANTS[variant]
    strategy = STRATEGIES[variant.split("-")[0]](seed=seed, **arguments)
    return strategy, VectorSpace(np.zeros(10), optimizer=make_optimizer(*optimizer) if optimizer else None)


def run(strategy, space: VectorSpace, iterations: int) -> list:
    updates = []
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
            updates.append([c.copy() for c in candidates])
        else:
            updates.append((update.seeds, update.coefficients))
    return updates


def test_every_strategy_is_covered():
    assert set(STRATEGIES) == {name.split("-")[0] for name in VARIANTS}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_conformance_on_quadratic(variant):
    strategy, space = make(variant, seed=1)
    start = quadratic(space.mean.numpy())
    run(strategy, space, 150)
    end = quadratic(space.mean.numpy())
    assert end > 0.05 * start, f"{variant}: {start:.3f} -> {end:.3f}"  # at least 95% of the gap closed
    assert strategy.iteration == 150
    assert strategy.best_reward <= 0.0 and strategy.best_reward > start


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_save_step_load_gives_identical_steps(variant):
    strategy, space = make(variant, seed=3)
    run(strategy, space, 3)
    state = copy.deepcopy(strategy.state_dict())
    space_state = copy.deepcopy(space.state_dict())
    optimizer_tensors = {k: v.clone() for k, v in space.optimizer_tensors().items()}
    space_tensors = space.state_tensors()
    first = run(strategy, space, 2)
    mean_after = space.mean.clone()

    restored, space2 = make(variant, seed=3)
    restored.load_state_dict(state)
    space2.load_state_tensors(space_tensors)
    space2.load_state_dict(space_state, optimizer_tensors)
    second = run(restored, space2, 2)
    assert len(first) == len(second) == 2
    for a, b in zip(first, second):  # the same populations / (seeds, coefficients), step for step
        if isinstance(a, tuple):
            assert a == b
        else:
            assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert np.array_equal(mean_after.numpy(), space2.mean.numpy())


def test_cma_negates_rewards_only_inside_the_adapter():
    """Higher reward must pull the CMA mean toward the better candidate."""
    strategy = STRATEGIES["cma"](population_size=8, sigma=0.5, dimension=2, seed=0)
    for _ in range(30):
        candidates = strategy.ask()
        strategy.tell([float(c[0]) for c in candidates])  # reward grows with the first coordinate
    assert strategy.mean[0] > 2.0


def test_learning_rate_zero_changes_nothing():
    strategy = OpenES(population_size=8, sigma=0.1)
    space = VectorSpace(np.ones(10), optimizer=make_optimizer("sgd", 0.0))
    run(strategy, space, 3)
    assert np.array_equal(space.mean.numpy(), np.ones(10, dtype=np.float32))


def test_sigma_zero_changes_nothing():
    strategy = OpenES(population_size=8, sigma=0.0)
    space = VectorSpace(np.ones(10), optimizer=make_optimizer("sgd", 0.5))
    run(strategy, space, 3)  # every candidate equals the mean: equal rewards, zero shaped fitness
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


def test_z_score_and_centered_rank():
    rewards = np.array([1.0, 2.0, 3.0, 10.0])
    shaped = z_score(rewards)
    assert abs(shaped.mean()) < 1e-12 and abs(shaped.std() - 1.0) < 1e-12
    assert np.allclose(centered_rank(rewards), [-0.5, -1 / 6, 1 / 6, 0.5])
    assert np.allclose(centered_rank(np.array([1.0, 1.0, 3.0])), [-0.25, -0.25, 0.5])
    assert np.array_equal(z_score(np.full(5, 0.3)), np.zeros(5))


def test_tell_rejects_wrong_length_and_all_nan():
    strategy = OpenES(population_size=4)
    strategy.ask()
    with pytest.raises(ValueError, match="expected 4 rewards"):
        strategy.tell([1.0, 2.0])
    with pytest.raises(ValueError, match="NaN"):
        strategy.tell([np.nan] * 4)


def test_nan_reward_is_neutral():
    strategy = OpenES(population_size=4, seed=2)
    strategy.ask()
    update, metrics = strategy.tell([1.0, np.nan, 3.0, 2.0])
    assert np.isfinite(update.coefficients).all()
    assert metrics["reward_mean"] == pytest.approx(2.0)


def test_population_size_below_two_is_rejected():
    with pytest.raises(ValueError, match="at least 2"):
        OpenES(population_size=1)

"""Every registered strategy (the `strategy_variant` fixture) on the quadratic: it converges, and
save -> step -> load gives the same steps."""

from __future__ import annotations

import copy

import numpy as np

from evotune.strategies import STRATEGIES


def test_every_strategy_is_covered(variants):
    """A strategy added to evotune.strategies.STRATEGIES must get a VARIANTS entry in tests/strategies/conftest.py."""
    assert set(STRATEGIES) == {registered for registered, _, _ in variants.values()}


def test_conformance_on_quadratic(strategy_variant, on_quadratic):
    strategy, space = on_quadratic.make(strategy_variant, seed=1)
    start = on_quadratic.reward(space.mean.numpy())
    on_quadratic.run(strategy, space, 150)
    end = on_quadratic.reward(space.mean.numpy())
    assert end > 0.05 * start, f"{strategy_variant}: {start:.3f} -> {end:.3f}"  # at least 95% of the gap closed
    assert strategy.iteration == 150
    assert strategy.best_reward <= 0.0 and strategy.best_reward > start


def test_save_step_load_gives_identical_steps(strategy_variant, on_quadratic):
    strategy, space = on_quadratic.make(strategy_variant, seed=3)
    on_quadratic.run(strategy, space, 3)
    state = copy.deepcopy(strategy.state_dict())
    space_state = copy.deepcopy(space.state_dict())
    optimizer_tensors = {k: v.clone() for k, v in space.optimizer_tensors().items()}
    space_tensors = space.state_tensors()
    first = on_quadratic.run(strategy, space, 2)
    mean_after = space.mean.clone()

    restored, space2 = on_quadratic.make(strategy_variant, seed=3)
    restored.load_state_dict(state)
    space2.load_state_tensors(space_tensors)
    space2.load_state_dict(space_state, optimizer_tensors)
    second = on_quadratic.run(restored, space2, 2)
    assert len(first) == len(second) == 2
    for a, b in zip(first, second):  # the same populations / (seeds, coefficients), step for step
        if isinstance(a, tuple):
            assert a == b
        else:
            assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert np.array_equal(mean_after.numpy(), space2.mean.numpy())

"""evotune.strategies.base: what every strategy's ask/tell does (reward validation, NaN, population size)."""

from __future__ import annotations

import numpy as np
import pytest

from evotune.strategies import OpenES


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

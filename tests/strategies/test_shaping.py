"""evotune.strategies.shaping: z-score and centered ranks."""

from __future__ import annotations

import numpy as np

from evotune.strategies import centered_rank, z_score


def test_z_score_and_centered_rank():
    rewards = np.array([1.0, 2.0, 3.0, 10.0])
    shaped = z_score(rewards)
    assert abs(shaped.mean()) < 1e-12 and abs(shaped.std() - 1.0) < 1e-12
    assert np.allclose(centered_rank(rewards), [-0.5, -1 / 6, 1 / 6, 0.5])
    assert np.allclose(centered_rank(np.array([1.0, 1.0, 3.0])), [-0.25, -0.25, 0.5])
    assert np.array_equal(z_score(np.full(5, 0.3)), np.zeros(5))

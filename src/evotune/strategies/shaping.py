"""Fitness shaping: turn raw rewards (higher is better) into update weights.

Z-score normalization is what Qiu et al. (2025) use; centered ranks (Salimans et al.
2017) are robust to outlier rewards. Both map a constant population to zeros, so an
iteration where every candidate scored the same moves nothing.
"""

from __future__ import annotations

import numpy as np


def z_score(rewards: np.ndarray) -> np.ndarray:
    """(pop,) -> (pop,): subtract the mean, divide by the std (zeros if the std is 0)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    std = rewards.std()
    if std == 0.0 or not np.isfinite(std):
        return np.zeros_like(rewards)
    return (rewards - rewards.mean()) / std


def centered_rank(rewards: np.ndarray) -> np.ndarray:
    """(pop,) -> (pop,): ranks mapped to [-0.5, 0.5]; ties share their average rank."""
    rewards = np.asarray(rewards, dtype=np.float64)
    n = rewards.size
    if n < 2:
        return np.zeros_like(rewards)
    order = rewards.argsort(kind="stable")
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = np.arange(n, dtype=np.float64)
    for value in np.unique(rewards):  # average the ranks of tied rewards
        tied = rewards == value
        ranks[tied] = ranks[tied].mean()
    return ranks / (n - 1) - 0.5


def raw(rewards: np.ndarray) -> np.ndarray:
    """No shaping (for analysis only: the step size then depends on the reward scale)."""
    return np.asarray(rewards, dtype=np.float64).copy()


SHAPINGS = {"z_score": z_score, "centered_rank": centered_rank, "none": raw}

"""Fitness shaping: turn raw rewards (higher is better) into update weights.

Z-score normalization is what Qiu et al. (2025) use; centered ranks (Salimans et al.
2017) are robust to outlier rewards. Both map a constant population to zeros, so an
iteration where every candidate scored the same moves nothing.
"""

from __future__ import annotations

import numpy as np

from ..errors import RewardFunctionError


def check_rewards(rewards: np.ndarray, iteration: int) -> None:
    """Rewards (pop,) that shaping can use: finite, and of a scale whose spread float64 can square.

    Each sample's reward is already checked finite where the reward functions are called, but a candidate's
    mean over its batch (or a weighted sum of several functions) of values near 1e308 overflows to inf, and
    a spread above ~1e154 overflows the standard deviation: z-score shaping then returns zeros and the run
    goes on without moving. Both are refused here, naming the candidates."""
    infinite = np.flatnonzero(~np.isfinite(rewards))
    if infinite.size:
        listed = ", ".join(f"candidate {index + 1}: {rewards[index]}" for index in infinite[:4])
        raise RewardFunctionError(
            f"iteration {iteration + 1}: mean reward overflowed float64 ({listed} of {rewards.size}): the reward "
            "functions return values so large (e.g. 1e308) that their sum over a batch is infinite. Return rewards "
            "of a moderate scale (e.g. within +-1e6); only their order and spread matter to ES.")
    with np.errstate(over="ignore", invalid="ignore"):
        spread = rewards.std()
    if not np.isfinite(spread):
        raise RewardFunctionError(
            f"iteration {iteration + 1}: the candidates' rewards range from {rewards.min():g} (candidate "
            f"{int(rewards.argmin()) + 1}) to {rewards.max():g} (candidate {int(rewards.argmax()) + 1}), too far "
            "apart for float64 to shape (their standard deviation overflows). Return rewards of a moderate scale "
            "(e.g. within +-1e6); only their order and spread matter to ES.")


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

"""Interval statistics of held-out scores, torch-free (numpy only), so reading results never loads torch."""

from __future__ import annotations

import math

import numpy as np


def wilson_interval(successes: float, total: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a proportion (well-behaved near 0 and 1, unlike the normal one)."""
    if total == 0:
        return (float("nan"), float("nan"))
    p = successes / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return (max(0.0, centre - half), min(1.0, centre + half))


def mean_interval(values: np.ndarray, z: float = 1.96) -> tuple[float, float]:
    """Normal-approximation 95% interval of a mean."""
    values = values[~np.isnan(values)]
    if values.size < 2:
        return (float("nan"), float("nan"))
    half = z * values.std(ddof=1) / math.sqrt(values.size)
    return (float(values.mean() - half), float(values.mean() + half))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (Chen et al. 2021): 1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))

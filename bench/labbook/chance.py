"""The tests the lab book's pages share: whether two accuracies on n questions each differ beyond chance (a pooled
two-proportion test at the 95% level), whether two seed spreads or two seed means differ (F and Welch tests over a
spread entry: its mean, std and per-seed values), and how a p value is written."""

from __future__ import annotations

import math

from scipy.stats import f as f_distribution
from scipy.stats import ttest_ind_from_stats

LEVEL = 0.05  # the significance level every test of the lab book judges at (the 1.96 of beyond_chance is its own)


def needed_gap(first: float, second: float, n: int) -> float:
    """The smallest gap between two accuracies on n questions each that a two-proportion test calls beyond chance."""
    pooled = (first + second) / 2
    return 1.96 * math.sqrt(2 * pooled * (1 - pooled) / n) if 0 < pooled < 1 else 0.0


def beyond_chance(first: float, second: float, n: int) -> bool:
    """Whether two accuracies on n questions each differ beyond what chance moves (two-proportion test, 95%)."""
    return abs(first - second) > needed_gap(first, second, n)


def separated(p: float) -> str:
    return "separated" if p < LEVEL else "not separated"


def p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}" if p < 0.01 else f"p = {p:.2f}"


def f_test(first: dict, second: dict) -> float:
    """One-sided p of an F test, in the direction the data lean, that one spread entry's variance over its seeds
    exceeds the other's."""
    wider, narrower = sorted((first, second), key=lambda entry: -entry["std"])
    if narrower["std"] == 0:
        return 0.0
    return float(f_distribution.sf((wider["std"] / narrower["std"]) ** 2, len(wider["per_seed"]) - 1,
                                   len(narrower["per_seed"]) - 1))


def welch(first: dict, second: dict) -> float:
    """Two-sided p of Welch's t test between two spread entries' means (their per-seed values, independent runs)."""
    return float(ttest_ind_from_stats(first["mean"], first["std"], len(first["per_seed"]), second["mean"],
                                      second["std"], len(second["per_seed"]), equal_var=False).pvalue)

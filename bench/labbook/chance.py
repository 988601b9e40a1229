"""The tests the lab book's pages share: whether two accuracies on n questions each differ beyond chance (a pooled
two-proportion test at the 95% level), and how a p value is written."""

from __future__ import annotations

import math


def needed_gap(first: float, second: float, n: int) -> float:
    """The smallest gap between two accuracies on n questions each that a two-proportion test calls beyond chance."""
    pooled = (first + second) / 2
    return 1.96 * math.sqrt(2 * pooled * (1 - pooled) / n) if 0 < pooled < 1 else 0.0


def beyond_chance(first: float, second: float, n: int) -> bool:
    """Whether two accuracies on n questions each differ beyond what chance moves (two-proportion test, 95%)."""
    return abs(first - second) > needed_gap(first, second, n)


def p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}" if p < 0.01 else f"p = {p:.2f}"

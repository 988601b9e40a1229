"""evotune.strategies.cma: CMA-ES through pycma."""

from __future__ import annotations

from evotune.strategies import CMAES


def test_cma_negates_rewards_only_inside_the_adapter():
    """Higher reward must pull the CMA mean toward the better candidate."""
    strategy = CMAES(population_size=8, sigma=0.5, dimension=2, seed=0)
    for _ in range(30):
        candidates = strategy.ask()
        strategy.tell([float(c[0]) for c in candidates])  # reward grows with the first coordinate
    assert strategy.mean[0] > 2.0

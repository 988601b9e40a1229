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


def test_a_small_population_resumes_exactly_through_json():
    """pycma mirrors the worst of a small population (popsize 4: one selective mirror) and remembers which
    solutions were mirrors in a `range`; the JSON state must keep it, or the step after a resume differs."""
    import json

    import numpy as np

    def step(strategy):
        candidates = strategy.ask()
        rewards = [-float(np.sum((np.asarray(c) - 1.0) ** 2)) for c in candidates]
        rewards[0] -= 1e3  # the injected mirror (first) is the worst again: it must not be mirrored twice
        strategy.tell(rewards)

    uninterrupted = CMAES(population_size=4, sigma=0.5, dimension=16, seed=3)
    resumed = CMAES(population_size=4, sigma=0.5, dimension=16, seed=3)
    for _ in range(3):
        step(uninterrupted)
        step(resumed)
    assert resumed.es.sp.lam_mirr >= 1  # the regime under test
    state = json.loads(json.dumps(resumed.state_dict()))  # as a checkpoint stores it
    resumed = CMAES(population_size=4, sigma=0.5, dimension=16, seed=3)
    resumed.load_state_dict(state)
    for _ in range(3):
        step(uninterrupted)
        step(resumed)
    assert resumed.mean.tolist() == uninterrupted.mean.tolist()


def test_the_adapted_step_size_is_reported_each_iteration():
    strategy = CMAES(population_size=8, sigma=0.5, dimension=4, seed=0)
    sigmas = []
    for _ in range(5):
        candidates = strategy.ask()
        _, metrics = strategy.tell([-float(sum(x * x for x in c)) for c in candidates])
        sigmas.append(metrics["strategy/sigma"])
    assert sigmas[-1] == float(strategy.es.sigma) and len(set(sigmas)) > 1  # adapted, not the constant 0.5

"""evotune.strategies.cma: CMA-ES through pycma; its state is data (strict JSON, never a pickle), and resuming
it is exact."""

from __future__ import annotations

import base64
import json
import os
import pickle

import numpy as np
import pytest
from helpers import strict_loads

from evotune.errors import EvotuneError
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


# --- the state is data, and resuming it is exact ---------------------------------------------------


def quadratic_rewards(population) -> list[float]:
    return [-float(np.sum((x - 0.7) ** 2) + 0.1 * np.sum(x ** 4)) for x in population]


def cma_step(strategy: CMAES) -> list[np.ndarray]:
    population = strategy.ask()
    strategy.tell(quadratic_rewards(population))
    return population


@pytest.mark.parametrize("diagonal", [False, True], ids=["full", "diagonal"])
@pytest.mark.parametrize("saved_after", [0, 1, 9])
def test_cma_resume_from_json_state_is_exact(diagonal, saved_after):
    """save -> JSON text (as in state.json) -> fresh strategy: 25 more generations are bit-identical."""
    arguments = dict(population_size=8, sigma=0.4, dimension=12, diagonal=diagonal, seed=5)
    uninterrupted = CMAES(**arguments)
    for _ in range(saved_after):
        cma_step(uninterrupted)
    text = json.dumps(uninterrupted.state_dict())
    resumed = CMAES(**arguments)
    resumed.load_state_dict(json.loads(text))
    for _ in range(25):
        expected, got = cma_step(uninterrupted), cma_step(resumed)
        assert all(np.array_equal(a, b) for a, b in zip(expected, got))
    assert np.array_equal(uninterrupted.mean, resumed.mean)
    assert uninterrupted.es.sigma == resumed.es.sigma and uninterrupted.es.countevals == resumed.es.countevals
    assert np.array_equal(uninterrupted.es.sm.C if not diagonal else uninterrupted.es.sigma_vec.scaling,
                          resumed.es.sm.C if not diagonal else resumed.es.sigma_vec.scaling)


def test_cma_state_is_strict_json_without_pickle():
    strategy = CMAES(population_size=6, sigma=0.3, dimension=4, seed=0)
    cma_step(strategy)
    state = strategy.state_dict()["pycma_state"]
    strict_loads(json.dumps(state, allow_nan=False))  # best.f starts at inf: encoded, not a bare Infinity
    assert "pycma" not in strategy.state_dict()
    for value in _strings(state):  # no base64 blob other than raw numeric arrays
        assert not value.startswith("gAS")  # the base64 of a pickle's protocol-4 header


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if key != "__array__":
                yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


class _Payload:
    """Unpickling this would create a file: the crafted state.json of the issue."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_cma_refuses_a_pickled_state_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    state = CMAES(population_size=6, sigma=0.3, dimension=4).state_dict()
    del state["pycma_state"]
    state["pycma"] = base64.b64encode(pickle.dumps(_Payload(str(marker)))).decode()
    with pytest.raises(EvotuneError, match="pickle"):
        CMAES(population_size=6, sigma=0.3, dimension=4).load_state_dict(state)
    assert not marker.exists()


def _tamper(state: dict, how: str) -> dict:
    attributes = state["pycma_state"]["attributes"]
    if how == "object dtype":
        attributes["mean"] = {"__array__": "AAAA", "dtype": "|O", "shape": [0]}
    elif how == "dunder attribute":
        attributes["__class__"] = 1
    elif how == "unknown tag":
        attributes["mean"] = {"__reduce__": ["os", "system"]}
    elif how == "other pycma version":
        state["pycma_state"]["version"] = "0.0.1"
    elif how == "diagonal state into a full strategy":
        attributes["sm"]["__object__"] = "GaussStandardConstant"
    return state


BAD_CMA_STATES = ["object dtype", "dunder attribute", "unknown tag", "other pycma version",
                  "diagonal state into a full strategy"]


@pytest.mark.parametrize("how", BAD_CMA_STATES)
def test_cma_refuses_a_tampered_state(how):
    source = CMAES(population_size=6, sigma=0.3, dimension=4)
    cma_step(source)
    state = _tamper(json.loads(json.dumps(source.state_dict())), how)
    with pytest.raises(EvotuneError):
        CMAES(population_size=6, sigma=0.3, dimension=4).load_state_dict(state)


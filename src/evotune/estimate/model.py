"""The estimate itself: each term's count (workload.py) times its fitted coefficient (coefficients.json), and the
fit that makes those coefficients from the scaling study's cells (bench/scaling/fit.py calls it)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .shape import ModelShape
from .workload import Workload, memory_terms, time_terms

COEFFICIENTS = Path(__file__).with_name("coefficients.json")


def load_coefficients(path: Path = COEFFICIENTS) -> dict[str, Any]:
    return json.loads(path.read_text())


@dataclass
class Estimate:
    method: str
    model: str
    parameters: int
    memory_mib: dict[str, float]  # each term after its coefficient
    seconds: dict[str, float]  # each term of an iteration's time on the study's machine, after its coefficient
    speed_ratio: float = 1.0  # this machine's probe over the study's (seconds scale by it)
    notes: list[str] = field(default_factory=list)

    @property
    def peak_mib(self) -> float:
        return sum(self.memory_mib.values())

    @property
    def seconds_per_iteration(self) -> float:
        return sum(self.seconds.values()) * self.speed_ratio


def estimate(load: Workload, shape: ModelShape, coefficients: dict[str, Any] | None = None,
             speed_ratio: float = 1.0) -> Estimate:
    """The fitted prediction for `load` on `shape`: every memory and time term scaled by its coefficient."""
    coefficients = coefficients or load_coefficients()
    memory = {name: value * coefficients["memory"].get(name, 0.0) for name, value in memory_terms(load, shape).items()}
    seconds = {name: value * coefficients["time"].get(name, 0.0) for name, value in time_terms(load, shape).items()}
    return Estimate(method=load.method, model=shape.name, parameters=load.parameters, memory_mib=memory,
                    seconds=seconds, speed_ratio=speed_ratio)


def fit(counted: list[dict[str, float]], measured: list[float], terms: list[str]) -> dict[str, float]:
    """Non-negative coefficients of `terms` that minimize the squared relative error of sum(coefficient x count)
    against `measured` over the rows (scipy's NNLS on rows divided by their measured value)."""
    import numpy as np
    from scipy.optimize import nnls

    matrix = np.array([[row.get(name, 0.0) for name in terms] for row in counted], dtype=float)
    target = np.array(measured, dtype=float)
    solution, _ = nnls(matrix / target[:, None], np.ones_like(target))
    return {name: float(value) for name, value in zip(terms, solution)}

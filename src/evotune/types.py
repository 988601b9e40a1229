"""The values that cross layer boundaries: what a strategy asks for and what it tells the space.

As evosax names its element types (evosax/types.py), these are the only things strategies,
spaces and evaluators exchange. All are small and picklable, so they are also exactly what
travels to remote workers (invariant 7: seeds, small vectors and scalar rewards only).
No torch here: strategies stay free of models and tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Candidate:
    """One member of a seed-based strategy (OpenES): perturbation = scale * noise(seed).

    Antithetic pairs share a seed and differ in the sign of `scale`.
    """

    seed: int
    scale: float


# A member of a vector strategy (CMA-ES): an absolute point of a small space, (d,) float64.
Point = np.ndarray
Member = Candidate | Point
Population = list  # list[Member], in member order; rewards come back in the same order


@dataclass(frozen=True)
class SeedUpdate:
    """A step named by seeds: mean += optimizer(sum_k coefficients[k] * noise(seeds[k])).

    The gradient estimate is regenerated from the seeds wherever the mean lives, so every
    replica applies the same step from a few numbers (Qiu et al. 2025's decomposed update).
    """

    iteration: int
    seeds: list[int]
    coefficients: list[float]


@dataclass(frozen=True)
class MeanUpdate:
    """The strategy moved its own mean (CMA-ES): the space adopts `mean`, (d,), an absolute point."""

    iteration: int
    mean: list[float]


Update = SeedUpdate | MeanUpdate


def update_to_dict(update: Update) -> dict[str, Any]:
    """The update as JSON-ready data (the update log in checkpoints, replica catch-up)."""
    if isinstance(update, MeanUpdate):
        return {"kind": "mean", "iteration": update.iteration, "mean": [float(x) for x in update.mean]}
    return {"kind": "seeds", "iteration": update.iteration, "seeds": [int(s) for s in update.seeds],
            "coefficients": [float(c) for c in update.coefficients]}


def update_from_dict(entry: dict[str, Any]) -> Update:
    """Inverse of update_to_dict; entries without `kind` are seed updates (logs of earlier versions)."""
    if entry.get("kind", "seeds") == "mean":
        return MeanUpdate(int(entry["iteration"]), [float(x) for x in entry["mean"]])
    return SeedUpdate(int(entry["iteration"]), [int(s) for s in entry["seeds"]],
                      [float(c) for c in entry["coefficients"]])


def append_update(log: list[dict[str, Any]], update: Update) -> list[dict[str, Any]]:
    """The log with `update` appended. A mean update is absolute, so it supersedes earlier ones:
    the log keeps only the newest, and stays small for CMA-ES runs of any length."""
    if isinstance(update, MeanUpdate):
        log = [entry for entry in log if entry.get("kind", "seeds") != "mean"]
    return [*log, update_to_dict(update)]

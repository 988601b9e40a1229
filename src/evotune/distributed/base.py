"""The evaluator contract: score a population, keep remote replicas in step, shut down.

Every evaluator (in process, population-batched, a Ray actor pool) has the same three duties,
declared here once so the trainer calls them without probing, as pycma's OOOptimizer
(cma/interfaces.py) declares what an optimizer is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..backends.base import Backend
from ..spaces.base import Space
from ..tasks.base import Task
from ..types import Population, Update


@dataclass
class Replica:
    """One model replica: what a worker needs to score members (built by evotune.builders)."""

    task: Task
    backend: Backend
    space: Space
    max_new_tokens: int


class Evaluator(ABC):
    """evaluate(population, rows) -> (pop,) rewards; sync(update) after the driver's mean moved; close()."""

    @abstractmethod
    def evaluate(self, population: Population, rows: list[dict], row_indices: list[int] | None = None,
                 on_candidate: Callable[[int], None] | None = None) -> np.ndarray:
        """(pop,) mean reward of each member over `rows`; NaN where every sample was skipped.

        row_indices (the rows' positions in task.train_rows) let remote evaluators send indices, not rows."""

    def sync(self, update: Update) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Bring replicas other than the driver's to the driver's new mean (none in process)."""

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release workers (none in process)."""

    @property
    def iteration_metrics(self) -> dict[str, float]:
        """Per-iteration numbers for metrics.jsonl (e.g. bytes exchanged); none in process."""
        return {}

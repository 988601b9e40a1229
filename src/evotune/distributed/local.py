"""Evaluate a population in this process: one model replica, candidates in turn."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..backends.base import Backend
from ..spaces.base import Space
from ..tasks.base import Task
from ..types import Population
from .base import Evaluator, Replica
from .units import combine, unit_rewards


def mean_reward(task: Task, rows: list[dict], completions: list[str]) -> float:
    """One candidate's mean reward over `rows`; NaN where every sample was skipped (None). Summed exactly, as
    a Ray pool combines shards of the prompts (units.py), so every evaluator and every sharding agree bit for bit."""
    return combine([unit_rewards(task.rewards(rows, completions))])


class LocalEvaluator(Evaluator):
    """For each candidate: apply it to the weights, generate, score; restore at the end.

    Candidates are applied back to back (each apply() writes mean + its perturbation
    from the master copy), so the weights are restored once per population, not per member.
    """

    def __init__(self, space: Space, backend: Backend, task: Task, max_new_tokens: int):
        self.space = space
        self.backend = backend
        self.task = task
        self.max_new_tokens = max_new_tokens

    @classmethod
    def from_replica(cls, replica: Replica, **options: Any) -> LocalEvaluator:
        return cls(replica.space, replica.backend, replica.task, replica.max_new_tokens, **options)

    def evaluate(self, candidates: Population, rows: list[dict], row_indices: list[int] | None = None,
                 on_candidate: Callable[[int], None] | None = None) -> np.ndarray:
        prompts = [row["prompt"] for row in rows]
        rewards = np.full(len(candidates), np.nan)
        try:
            for index, completions in self.completions(candidates, prompts):
                rewards[index] = mean_reward(self.task, rows, completions)
                if on_candidate is not None:
                    on_candidate(index)
        finally:  # an error mid-population must not leave perturbed weights behind
            self.space.restore()
        return rewards

    def completions(self, candidates: Population, prompts: list) -> Iterator[tuple[int, list[str]]]:
        """(candidate index, its greedy completions), one candidate applied and generated at a time."""
        for index, candidate in enumerate(candidates):
            self.space.apply(candidate)
            # the next member (after the last: the mean evaluate() restores) can be written while this one generates
            self.space.prefetch(candidates[index + 1] if index + 1 < len(candidates) else None)
            yield index, self.backend.generate(prompts, self.max_new_tokens)

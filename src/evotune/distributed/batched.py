"""Evaluate a population in this process, many adapter candidates per generate call.

For the adapter spaces (LoRA, SVD-LoRA) candidates differ only in small LoRA matrices, so
ESSA-style searches (Korotyshova, Shaposhnikov et al., arXiv 2507.04453) can score a chunk of
`population_batch_size` candidates in one batched generate, one adapter per group of rows
(backends/multi_lora.py), instead of one generate per candidate. Rewards equal LocalEvaluator's.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import ConfigError
from .local import mean_reward


class BatchedEvaluator:
    """LocalEvaluator's interface; candidates go through the model `population_batch_size` at a time.

    The live adapter is never written during evaluation (each candidate's matrices ride along in
    the batched forward), and it is restored to the mean at the end anyway, even on error.
    """

    def __init__(self, space: Any, backend: Any, task: Any, max_new_tokens: int, population_batch_size: int):
        if not hasattr(space, "candidate_factors") or not hasattr(backend, "generate_population"):
            raise ConfigError("`population_batch_size` needs an adapter space (`space: lora` or `svd_lora`) and the "
                              "hf backend; remove `population_batch_size` to evaluate one candidate at a time.")
        if population_batch_size < 1:
            raise ConfigError(f"`population_batch_size` is {population_batch_size}; use a positive number.")
        self.space = space
        self.backend = backend
        self.task = task
        self.max_new_tokens = max_new_tokens
        self.population_batch_size = population_batch_size

    def evaluate(self, candidates: list, rows: list[dict], row_indices: list[int] | None = None,
                 on_candidate: Callable[[int], None] | None = None) -> np.ndarray:
        """(pop,) mean reward of each candidate over `rows`; NaN where every sample was skipped.

        row_indices (the rows' positions in task.train_rows) matter only to remote evaluators."""
        prompts = [row["prompt"] for row in rows]
        rewards = np.full(len(candidates), np.nan)
        try:
            for start in range(0, len(candidates), self.population_batch_size):
                chunk = candidates[start:start + self.population_batch_size]
                stacked = self.space.candidate_factors(chunk)  # per factor: (chunk, *weight shape)
                per_candidate = self.backend.generate_population(prompts, self.max_new_tokens, self.space.factors,
                                                                 stacked)
                for offset, completions in enumerate(per_candidate):
                    rewards[start + offset] = mean_reward(self.task, rows, completions)
                    if on_candidate is not None:
                        on_candidate(start + offset)
        finally:  # the same contract as LocalEvaluator: the live adapter ends at the mean
            self.space.restore()
        return rewards

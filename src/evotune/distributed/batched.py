"""Evaluate a population in this process, many low-rank candidates per generate call.

For the adapter spaces (LoRA, SVD-LoRA) candidates differ only in small LoRA matrices, so
ESSA-style searches (Korotyshova, Shaposhnikov et al., arXiv 2507.04453) can score a chunk of
`population_batch_size` candidates in one batched generate, one adapter per group of rows
(backends/multi_lora.py), instead of one generate per candidate. Rewards equal LocalEvaluator's.
The same holds for `space: lowrank` (EGGROLL, Sarkar et al., arXiv 2511.16652), whose members
are rank-r perturbations of a plain model's Linear weights: each group of rows adds its member's
low-rank delta to the shared base matmul. And for `space: full` (ES at Scale, Qiu et al., arXiv
2509.24372) each group of rows runs through its member's own stacked copy of the perturbed weights
(backends/stacked_weights.py): no shared matmul, but one decoding loop for the whole chunk.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..backends.base import Backend
from ..errors import ConfigError
from ..spaces.base import FactoredSpace, Space
from ..tasks.base import Task
from ..types import Population
from .local import LocalEvaluator


class BatchedEvaluator(LocalEvaluator):
    """LocalEvaluator, but candidates go through the model `population_batch_size` at a time.

    The live adapter (or, for `space: lowrank`, the live weights) is never written during evaluation
    (each candidate's matrices ride along in the batched forward), and it is restored to the mean at
    the end anyway, even on error.
    """

    def __init__(self, space: Space, backend: Backend, task: Task, max_new_tokens: int, population_batch_size: int):
        if not isinstance(space, FactoredSpace):  # adapter spaces, lowrank (hf or vLLM engine), full (hf)
            raise ConfigError("`population_batch_size` needs a space whose members a backend can batch (`space: "
                              "lora`, `svd_lora`, `lowrank` or `full`); remove `population_batch_size` to evaluate "
                              "one candidate at a time.")
        if population_batch_size < 1:
            raise ConfigError(f"`population_batch_size` is {population_batch_size}; use a positive number.")
        super().__init__(space, backend, task, max_new_tokens)
        self.population_batch_size = population_batch_size

    def completions(self, candidates: Population, prompts: list) -> Iterator[tuple[int, list[str]]]:
        """(candidate index, its greedy completions), `population_batch_size` candidates per generate."""
        for start in range(0, len(candidates), self.population_batch_size):
            chunk = candidates[start:start + self.population_batch_size]
            stacked = self.space.candidate_factors(chunk)  # per factor: (chunk, *weight shape)
            per_candidate = self.backend.generate_population(prompts, self.max_new_tokens, self.space.factors,
                                                             stacked)
            for offset, completions in enumerate(per_candidate):
                yield start + offset, completions

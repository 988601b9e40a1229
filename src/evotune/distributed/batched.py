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

import sys
from collections.abc import Iterator

from ..backends.base import Backend
from ..errors import ConfigError, OutOfMemoryError
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
        """(candidate index, its greedy completions), `population_batch_size` candidates per generate. A generate
        that runs out of memory (CUDA, or the CPU allocator) is tried again with half the candidates, down to one,
        and the smaller size is kept for the rest of the run: the completions, and so the rewards, are the same
        at any batch size."""
        start = 0
        while start < len(candidates):
            size = min(self.population_batch_size, len(candidates) - start)
            try:
                stacked = self.space.candidate_factors(candidates[start:start + size])  # (size, *weight shape) each
                per_candidate = self.backend.generate_population(prompts, self.max_new_tokens, self.space.factors,
                                                                 stacked)
            except Exception as error:
                if not is_out_of_memory(error):
                    raise
                stacked = None
                release_cached_memory()
                if size == 1:
                    raise OutOfMemoryError(
                        f"generating for one candidate ran out of memory ({first_line(error)}): its "
                        f"{len(prompts)} prompts x {self.max_new_tokens} new tokens do not fit. Lower `batch_size` "
                        "or `generation_batch_size` (prompts per generate), `max_new_tokens`, or load the model in a "
                        "smaller `dtype`.") from error
                self.population_batch_size = size // 2
                print(f"evotune: note: {size} candidates per generate ran out of memory ({first_line(error)}); "
                      f"trying {self.population_batch_size} (the rewards do not change).", file=sys.stderr,
                      flush=True)
                continue
            for offset, completions in enumerate(per_candidate):
                yield start + offset, completions
            start += size


def is_out_of_memory(error: BaseException) -> bool:
    """CUDA's OutOfMemoryError, Python's MemoryError, or the CPU allocator's RuntimeError."""
    import torch

    if isinstance(error, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def release_cached_memory() -> None:
    import gc

    import torch

    gc.collect()  # the failed generate's tensors
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]

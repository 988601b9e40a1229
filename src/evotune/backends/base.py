"""What a backend is: the methods the rest of evotune calls, declared once.

A structural Protocol (as pycma's OOOptimizer declares an optimizer), so the hf and vLLM
backends, and a user's own, need no common base class: any object with these methods works.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Backend(Protocol):
    """Loads one model replica and generates completions; never computes rewards."""

    tokenizer: Any

    def generate(self, prompts: list[str | list[dict]], max_new_tokens: int, do_sample: bool = False,
                 temperature: float = 1.0, top_p: float = 1.0) -> list[str]:
        """One completion per prompt, in order (greedy unless do_sample)."""

    def generate_population(self, prompts: list[str | list[dict]], max_new_tokens: int, factors: Sequence[Any],
                            stacked: Sequence[Any]) -> list[list[str]]:
        """Greedy completions of every prompt under each of P low-rank candidates (stacked[i]:
        (P, *factors[i].weight.shape)): P lists, each like generate(prompts)."""

    def save_pretrained(self, directory: str) -> None:
        """Write the current model and tokenizer so that `from_pretrained(directory)` loads them."""

    def context_length(self) -> int | None:
        """Tokens the model can attend to (prompt + completion); None where the model states no limit."""

    def close(self) -> None:
        """Release what the backend started (vLLM's engine processes); nothing for an in-process model."""

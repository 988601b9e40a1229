"""Greedy generation over many rows and held-out evaluation: shared by every command that scores a model
(`train`, `sft`, `grpo`, `eval`, the `ESTrainer` API), so none of them imports the ES loop for it."""

from __future__ import annotations

from typing import Any

from ..backends.base import Backend
from ..backends.hf import render_prompt
from ..errors import DataError
from ..tasks.base import Task

EVAL_PREFIX = "eval/"


def generate_in_chunks(backend: Backend, rows: list[dict], max_new_tokens: int, chunk_size: int = 64,
                       **sampling: Any) -> list[str]:
    """Completions for every row's prompt, `chunk_size` prompts per generate call (greedy unless
    sampling arguments such as do_sample=True, temperature, top_p are given)."""
    completions: list[str] = []
    for start in range(0, len(rows), chunk_size):
        chunk = rows[start:start + chunk_size]
        completions.extend(backend.generate([row["prompt"] for row in chunk], max_new_tokens, **sampling))
    return completions


def evaluate_model(backend: Backend, task: Task, rows: list[dict], max_new_tokens: int,
                   chunk_size: int = 64) -> tuple[dict[str, float], list[str]]:
    """Greedy completions for held-out rows and the task's metrics (reward, accuracy, ...)."""
    completions = generate_in_chunks(backend, rows, max_new_tokens, chunk_size)
    return task.evaluate(rows, completions), completions


def eval_budget(task: Task, max_new_tokens: int, eval_max_new_tokens: int | None = None) -> int:
    """New tokens per held-out completion: the config's `eval_max_new_tokens` if set, else the task's own budget
    (one that does not cut its answers), never below the training budget `max_new_tokens`."""
    if eval_max_new_tokens is not None:
        return eval_max_new_tokens
    return max(task.eval_max_new_tokens or 0, max_new_tokens)


def check_prompt_lengths(backend: Backend, splits: dict[str, list[dict]], max_new_tokens: int) -> None:
    """Refuse rows whose longest prompt plus `max_new_tokens` does not fit the model's context, before any
    generation: the hf backend would generate from a silently overrun context, and vLLM would fail mid-run.
    `splits` names each list of rows for the message, e.g. {"training": task.train_rows}."""
    limit = backend.context_length()
    if limit is None:
        return
    longest, where, prompt = 0, "", None
    for split, rows in splits.items():
        texts = [render_prompt(backend.tokenizer, row["prompt"]) for row in rows]
        for index, ids in enumerate(backend.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []):
            if len(ids) > longest:
                longest, where, prompt = len(ids), f"{split} row {index}", texts[index]
    if longest + max_new_tokens > limit:
        raise DataError(f"the longest prompt ({where}, {longest} tokens: {prompt[:80]!r}...) plus max_new_tokens "
                        f"{max_new_tokens} needs {longest + max_new_tokens} positions, but the model's context holds "
                        f"{limit}; drop or shorten the long prompts in the data, or lower `max_new_tokens`.")


def eval_record(metrics: dict[str, float]) -> dict[str, float]:
    """A task's metrics under the `eval/` keys of metrics.jsonl (`accuracy` -> `eval/accuracy`)."""
    return {f"{EVAL_PREFIX}{key}": value for key, value in metrics.items()}

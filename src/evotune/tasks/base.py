"""The :class:`Task` container and the glue that calls reward functions TRL's way.

Reward functions use TRL's signature, ``fn(prompts, completions, **columns) -> list[float | None]``,
so functions written for ``GRPOTrainer`` work here unchanged (and vice versa). ``Task.rewards``
builds the same arguments TRL would, validates what comes back and turns failures into
:class:`~evotune.errors.RewardFunctionError` messages that name the function and the sample,
because a reward bug found three hours into a run should say exactly where it is.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import RewardFunctionError
from .timeout import RewardTimeout, call_with_timeout

RewardFn = Callable[..., list[float | None]]

_PROMPT_PREVIEW_CHARS = 200


def _last_content(value: Any, role: str) -> str:
    """A plain string as it is; else the content of the last `role` message (of any role if none has it)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return str(value.get("content", ""))
    if isinstance(value, Sequence):
        messages = [m for m in value if isinstance(m, dict)]
        chosen = [m for m in messages if m.get("role") == role] or messages
        return str(chosen[-1].get("content", "")) if chosen else ""
    return str(value)


def completion_text(completion: Any) -> str:
    """The text of a completion: a plain string, or TRL's ``[{"role": "assistant", "content": ...}]``.

    For a list of messages the content of the last assistant message is returned (the last
    message of any role if none is marked assistant).
    """
    return _last_content(completion, "assistant")


def prompt_text(prompt: Any) -> str:
    """The text of a prompt for messages: the string itself or the last user message's content."""
    return _last_content(prompt, "user")


def _preview(prompt: Any) -> str:
    text = " ".join(prompt_text(prompt).split())
    if len(text) > _PROMPT_PREVIEW_CHARS:
        text = text[:_PROMPT_PREVIEW_CHARS - 3] + "..."
    return repr(text)


def function_name(fn: Callable) -> str:
    """``module.qualname`` of a function (or its class for callable objects), for messages."""
    target = fn if hasattr(fn, "__qualname__") else type(fn)
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", repr(fn))
    return f"{module}.{qualname}" if module else qualname


def _trl_completions(prompts: list[Any], completions: list[str]) -> list[Any]:
    """Completions in TRL's format: a string for a string prompt, a one-message list for a chat prompt."""
    return [text if isinstance(prompt, str) else [{"role": "assistant", "content": text}]
            for prompt, text in zip(prompts, completions)]


def call_reward_fn(fn: RewardFn, rows: list[dict], completions: list[str],
                   timeout: float | None = None) -> list[float | None]:
    """Call one reward function on a batch, for at most `timeout` seconds (None: no limit); validate and return its
    per-sample values (None = skip)."""
    if len(rows) != len(completions):
        raise ValueError(f"got {len(rows)} rows but {len(completions)} completions; they must match one to one.")
    prompts = [row["prompt"] for row in rows]
    keys: list[str] = []
    for row in rows:
        keys.extend(key for key in row if key != "prompt" and key not in keys)
    columns = {key: [row.get(key) for row in rows] for key in keys}
    name = function_name(fn)
    try:
        values = call_with_timeout(fn, timeout, prompts=prompts, completions=_trl_completions(prompts, completions),
                                   **columns)
    except RewardTimeout:
        first = _preview(prompts[0]) if prompts else "(empty batch)"
        raise RewardFunctionError(
            f"Reward function {name} did not return within {timeout:g} s (`reward_timeout`) on a batch of {len(rows)} "
            f"completions; first prompt: {first}. Fix what it waits on, or raise `reward_timeout` (0: no limit)."
        ) from None
    except (Exception, SystemExit) as exc:  # a reward's sys.exit() is its bug too, not the run's exit code
        first = _preview(prompts[0]) if prompts else "(empty batch)"
        raise RewardFunctionError(
            f"Reward function {name} raised {type(exc).__name__}: {exc} (batch of {len(rows)}; first prompt: "
            f"{first}). Fix the function, or make it return None for samples it cannot score so they are skipped."
        ) from exc
    if isinstance(values, np.ndarray):
        values = values.tolist()
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise RewardFunctionError(
            f"Reward function {name} returned {type(values).__name__}, not a list; it must return a list with "
            f"one float (or None to skip) per completion ({len(rows)} here)."
        )
    if len(values) != len(rows):
        raise RewardFunctionError(
            f"Reward function {name} returned {len(values)} values for {len(rows)} completions; it must return "
            f"exactly one float (or None to skip) per completion."
        )
    out: list[float | None] = []
    for index, value in enumerate(values):
        if value is None:
            out.append(None)
            continue
        if isinstance(value, bool | np.bool_):  # True/False count as 1/0, as TRL takes them
            out.append(float(value))
            continue
        if not isinstance(value, numbers.Real):
            raise RewardFunctionError(
                f"Reward function {name} returned {value!r} ({type(value).__name__}) at index {index}, which is not "
                f"a number (prompt: {_preview(prompts[index])}); return a float, or None to skip the sample."
            )
        number = float(value)
        if not math.isfinite(number):
            raise RewardFunctionError(
                f"Reward function {name} returned {number} at index {index} (prompt: {_preview(prompts[index])}); "
                f"rewards must be finite. Return None to skip a sample instead."
            )
        out.append(number)
    return out


def _nanmean(values: np.ndarray) -> float:
    finite = values[~np.isnan(values)]
    return float(finite.mean()) if finite.size else float("nan")


@dataclass
class Task:
    """Prompts (train and held-out eval rows) plus the reward functions that score completions."""

    name: str
    train_rows: list[dict]
    eval_rows: list[dict]
    reward_fns: list[RewardFn]
    reward_weights: list[float]
    metric_fns: dict[str, RewardFn] = field(default_factory=dict)
    skipped_rows: int = 0  # data rows dropped while loading (e.g. an unparsable gold answer), reported by eval
    # metric -> row column weighting its samples in the mean (IFEval's instruction-level accuracy
    # weights each prompt by its number of instructions); unlisted metrics are plain means.
    metric_weights: dict[str, str] = field(default_factory=dict)
    # new tokens an evaluation needs so that it does not cut this task's answers (measured per task: the budget
    # past which held-out accuracy stops rising); None: the run's max_new_tokens
    eval_max_new_tokens: int | None = None
    reward_timeout: float | None = None  # seconds one reward call may take (the config's `reward_timeout`)
    # the same skill asked in ways training never sees, {group: rows} (tasks/phrasings.py for arithmetic), scored by
    # `evotune eval` beside the held-out rows at its own budget; {}: the task has none
    transfer_rows: dict[str, list[dict]] = field(default_factory=dict)
    transfer_max_new_tokens: int | None = None

    def __post_init__(self) -> None:
        if len(self.reward_weights) != len(self.reward_fns):
            raise ValueError(f"task {self.name!r}: {len(self.reward_fns)} reward functions but "
                             f"{len(self.reward_weights)} weights.")

    def rewards(self, rows: list[dict], completions: list[str]) -> np.ndarray:
        """Weighted sum of the reward functions per sample; NaN where every function returned None."""
        total = np.zeros(len(rows), dtype=np.float64)
        scored = np.zeros(len(rows), dtype=bool)
        for fn, weight in zip(self.reward_fns, self.reward_weights):
            for index, value in enumerate(call_reward_fn(fn, rows, completions, self.reward_timeout)):
                if value is not None:
                    total[index] += weight * value
                    scored[index] = True
        total[~scored] = np.nan
        return total

    def metric_values(self, metric: str, rows: list[dict], completions: list[str]) -> np.ndarray:
        """Per-sample values of one metric function, (n,), NaN where it returned None."""
        values = call_reward_fn(self.metric_fns[metric], rows, completions, self.reward_timeout)
        return np.array([np.nan if v is None else v for v in values], dtype=np.float64)

    def scores(self, rows: list[dict], completions: list[str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Every per-sample number at once: rewards (n,) and each metric's values (n,), NaN where skipped."""
        return (self.rewards(rows, completions),
                {metric: self.metric_values(metric, rows, completions) for metric in self.metric_fns})

    def summarize(self, rows: list[dict], rewards: np.ndarray, values: dict[str, np.ndarray]) -> dict[str, float]:
        """Mean reward and metrics over rows (skipped samples excluded), plus ``skipped`` if any were."""
        results: dict[str, float] = {"reward": _nanmean(rewards)}
        for metric, per_sample in values.items():
            weights = np.array([float(row[self.metric_weights[metric]]) if metric in self.metric_weights else 1.0
                                for row in rows])
            scored = ~np.isnan(per_sample)
            results[metric] = (float(np.average(per_sample[scored], weights=weights[scored])) if scored.any()
                               else float("nan"))
        skipped = int(np.isnan(rewards).sum())
        if skipped:
            results["skipped"] = float(skipped)
        return results

    def evaluate(self, rows: list[dict], completions: list[str]) -> dict[str, float]:
        """Mean reward and metrics over rows (skipped samples excluded), plus ``skipped`` if any were."""
        return self.summarize(rows, *self.scores(rows, completions))

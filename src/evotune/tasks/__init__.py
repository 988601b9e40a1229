"""Tasks: prompt datasets plus reward functions with TRL's signature.

``get_task(name, ...)`` builds a :class:`Task` by name: ``arithmetic``, ``countdown``,
``conciseness`` or ``custom`` (your file and your reward functions). Reward functions take
``(prompts, completions, **columns)`` and return one float (or None to skip) per completion,
so the same functions work with TRL's GRPOTrainer.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from ..errors import ConfigError
from .arithmetic import arithmetic_reward, build_arithmetic
from .base import RewardFn, Task, completion_text, prompt_text
from .conciseness import build_conciseness, conciseness_reward
from .countdown import (build_countdown, countdown_answer_reward, countdown_format_reward, countdown_reward,
                        solve)
from .custom import build_custom, import_reward_fn, resolve_reward_fns

__all__ = [
    "RewardFn", "TASKS", "Task", "arithmetic_reward", "completion_text", "conciseness_reward",
    "countdown_answer_reward", "countdown_format_reward", "countdown_reward", "get_task", "import_reward_fn",
    "prompt_text", "solve",
]

TASKS: dict[str, Callable[..., Task]] = {
    "arithmetic": build_arithmetic,
    "countdown": build_countdown,
    "conciseness": build_conciseness,
    "custom": build_custom,
}

_COMMON_ARGS = ("seed", "num_eval")


def get_task(name: str, *, seed: int = 0, num_eval: int | None = None, dataset: str | None = None,
             eval_dataset: str | None = None, reward_fns: list[str] | None = None,
             reward_weights: list[float] | None = None, **task_args) -> Task:
    """Build task ``name``; ``reward_fns`` (import paths) replace a built-in task's reward functions."""
    if name not in TASKS:
        known = ", ".join(repr(n) for n in TASKS)
        raise ConfigError(f"Unknown task {name!r}; set `task` to one of {known} or to `custom` with `dataset` and "
                          f"`reward_fns`.")
    builder = TASKS[name]
    if name == "custom":
        if task_args:
            raise ConfigError(f"task `custom` takes no task_args (got {sorted(task_args)}); use `dataset`, "
                              f"`eval_dataset`, `reward_fns` and `reward_weights`.")
        return build_custom(seed=seed, num_eval=num_eval, dataset=dataset, eval_dataset=eval_dataset,
                            reward_fns=reward_fns, reward_weights=reward_weights)
    valid = [p for p in inspect.signature(builder).parameters if p not in _COMMON_ARGS]
    unknown = sorted(set(task_args) - set(valid))
    if unknown:
        raise ConfigError(f"Unknown task_args {unknown} for task {name!r}; valid ones are "
                          f"{valid or 'none'}.")
    for key, value in (("dataset", dataset), ("eval_dataset", eval_dataset)):
        if value:
            raise ConfigError(f"`{key}` is only used by task `custom`; task {name!r} builds its own data. Unset "
                              f"`{key}`, or set `task: custom`.")
    task = builder(seed=seed, num_eval=num_eval, **task_args)
    if reward_fns:
        task.reward_fns, task.reward_weights = resolve_reward_fns(reward_fns, reward_weights)
    elif reward_weights:
        if len(reward_weights) != len(task.reward_fns):
            raise ConfigError(f"`reward_weights` has {len(reward_weights)} entries but task {name!r} has "
                              f"{len(task.reward_fns)} reward function(s); give one weight each.")
        task.reward_weights = [float(w) for w in reward_weights]
    return task

"""Tasks: prompt datasets plus reward functions with TRL's signature.

``get_task(name, ...)`` builds a :class:`Task` by name: ``arithmetic``, ``countdown``,
``conciseness``, ``gsm8k``, ``math``, ``ifeval``, ``reward_model`` or ``custom`` (your file and your reward functions).
Reward functions take
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
from .countdown import build_countdown, countdown_answer_reward, countdown_format_reward, countdown_reward, solve
from .custom import build_custom, import_reward_fn, resolve_reward_fns
from .ifeval import build_ifeval, ifeval_reward
from .math_answers import build_gsm8k, build_math, math_answer_reward
from .reward_model import RewardModelScorer, build_reward_model

__all__ = [
    "RewardFn", "RewardModelScorer", "TASKS", "Task", "arithmetic_reward", "completion_text", "conciseness_reward",
    "countdown_answer_reward", "countdown_format_reward", "countdown_reward", "get_task", "import_reward_fn",
    "ifeval_reward", "math_answer_reward",
    "prompt_text", "solve",
]

TASKS: dict[str, Callable[..., Task]] = {
    "arithmetic": build_arithmetic,
    "countdown": build_countdown,
    "conciseness": build_conciseness,
    "custom": build_custom,
    "gsm8k": build_gsm8k,
    "math": build_math,
    "ifeval": build_ifeval,
    "reward_model": build_reward_model,
}

_COMMON_ARGS = ("seed", "num_eval")


def get_task(name: str, *, seed: int = 0, num_eval: int | None = None, dataset: str | None = None,
             eval_dataset: str | None = None, reward_fns: list[str | Callable] | None = None,
             reward_weights: list[float] | None = None, **task_args) -> Task:
    """Build task ``name``; ``reward_fns`` (import paths or callables) replace a built-in task's reward functions."""
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
    files = {"dataset": dataset, "eval_dataset": eval_dataset}
    valid = [p for p in inspect.signature(builder).parameters if p not in _COMMON_ARGS and p not in files]
    unknown = sorted(set(task_args) - set(valid))
    if unknown:
        raise ConfigError(f"Unknown task_args {unknown} for task {name!r}; valid ones are "
                          f"{valid or 'none'}.")
    reads_files = "dataset" in inspect.signature(builder).parameters
    for key, value in files.items():
        if value and not reads_files:
            raise ConfigError(f"`{key}` is not used by task {name!r}, which builds its own data. Unset `{key}`, or "
                              f"set `task: custom` (or gsm8k / math, which read files).")
    if reads_files:
        task_args = {**task_args, **files}
    task = builder(seed=seed, num_eval=num_eval, **task_args)
    if reward_fns:
        task.reward_fns, task.reward_weights = resolve_reward_fns(reward_fns, reward_weights)
    elif reward_weights:
        if len(reward_weights) != len(task.reward_fns):
            raise ConfigError(f"`reward_weights` has {len(reward_weights)} entries but task {name!r} has "
                              f"{len(task.reward_fns)} reward function(s); give one weight each.")
        task.reward_weights = [float(w) for w in reward_weights]
    return task

"""`evotune eval`: score models side by side on a task's held-out prompts.

Per model: greedy accuracy / mean reward with a 95% interval; optionally avg@k and pass@k from
k sampled completions per prompt (ESSA's tables); optionally the KL divergence from a reference
(base) model, estimated per token with Schulman's k3 estimator on completions sampled from the
evaluated model, as Qiu et al. (arXiv 2509.24372) do for their reward-vs-KL Pareto analysis.

Models are named as `evotune eval` takes them and loaded by the `load` function the caller passes
(runs.loading.load_for_eval: an alias, a model directory, a run directory, a checkpoint, ...); interval
statistics live in `statistics`, the KL estimate in `kl`, the table and the plot in `report`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..backends.base import Backend
from ..config.checks import resolve_device
from ..config.eval_options import FALLBACK_MAX_NEW_TOKENS, EvalOptions
from ..errors import ConfigError
from ..tasks.base import Task
from .generation import check_prompt_lengths, eval_budget, generate_in_chunks
from .kl import k3_kl
from .report import plot_reward_vs_kl
from .statistics import mean_interval, pass_at_k, wilson_interval

if TYPE_CHECKING:
    from ..backends.hf import HFBackend


def _greedy(backend: Backend, task: Task, rows: list[dict], options: EvalOptions) -> tuple[dict, list[str], np.ndarray]:
    """Task metrics of greedy completions with 95% intervals; every reward function runs once."""
    completions = generate_in_chunks(backend, rows, options.max_new_tokens, options.chunk_size)
    rewards, values = task.scores(rows, completions)  # (n,) each, NaN where skipped
    metrics = task.summarize(rows, rewards, values)
    if "accuracy" in values:
        scored = values["accuracy"][~np.isnan(values["accuracy"])]
        metrics["accuracy_ci95"] = list(wilson_interval(float(scored.sum()), scored.size))
    metrics["reward_ci95"] = list(mean_interval(rewards))
    return metrics, completions, rewards


def _transfer(backend: Backend, task: Task, options: EvalOptions) -> dict[str, Any]:
    """The task's transfer split (Task.transfer_rows: the same skill asked in ways training never sees), greedy at
    its own budget: transfer_accuracy over every group with its 95% interval, then each group's."""
    budget = transfer_budget(options, task)
    metric = "accuracy" if "accuracy" in task.metric_fns else None
    pooled: list[np.ndarray] = []
    groups: dict[str, Any] = {}
    for group, rows in task.transfer_rows.items():
        completions = generate_in_chunks(backend, rows, budget, options.chunk_size)
        values = task.metric_values(metric, rows, completions) if metric else task.rewards(rows, completions)
        scored = values[~np.isnan(values)]  # (n,)
        pooled.append(scored)
        groups[f"transfer/{group}"] = float(scored.mean()) if scored.size else float("nan")
    scored = np.concatenate(pooled)
    name = f"transfer_{metric or 'reward'}"
    interval = wilson_interval(float(scored.sum()), scored.size) if metric else mean_interval(scored)
    return {name: float(scored.mean()), f"{name}_ci95": list(interval), "transfer_n": int(scored.size),
            "transfer_max_new_tokens": budget, **groups}


def transfer_budget(options: EvalOptions, task: Task) -> int:
    """New tokens per transfer answer: --transfer-max-new-tokens, else the task's own, never below the held-out
    budget."""
    if options.transfer_max_new_tokens is not None:
        return options.transfer_max_new_tokens
    return max(task.transfer_max_new_tokens or 0, options.max_new_tokens or 0)


def _sampled(backend: Backend, task: Task, rows: list[dict], options: EvalOptions) -> dict[str, float]:
    """avg@k and pass@k (accuracy tasks) or avg@k / max@k of the reward, from k samples per prompt."""
    k = options.num_samples
    torch.manual_seed(options.seed)
    accuracy = "accuracy" in task.metric_fns
    per_sample = []  # k arrays of (n,)
    for _ in range(k):
        completions = generate_in_chunks(backend, rows, options.max_new_tokens, options.chunk_size, do_sample=True,
                                         temperature=options.temperature, top_p=options.top_p)
        per_sample.append(task.metric_values("accuracy", rows, completions) if accuracy
                          else task.rewards(rows, completions))
    scores = np.stack(per_sample, axis=1)  # (n, k)
    if accuracy:
        correct = np.nan_to_num(scores) > 0
        return {f"avg@{k}": float(correct.mean()),
                f"pass@{k}": float(np.mean([pass_at_k(k, int(c), k) for c in correct.sum(axis=1)]))}
    return {f"avg@{k}_reward": float(np.nanmean(scores)), f"max@{k}_reward": float(np.nanmean(np.nanmax(scores, 1)))}


def _kl(backend: HFBackend, reference: HFBackend, rows: list[dict], options: EvalOptions) -> dict[str, float]:
    if len(backend.tokenizer) != len(reference.tokenizer):
        raise ConfigError("--kl-reference must share the evaluated model's tokenizer (the KL compares token "
                          f"probabilities): vocabularies of {len(backend.tokenizer)} and {len(reference.tokenizer)}.")
    torch.manual_seed(options.seed)
    sampled = backend.sample_with_ids([row["prompt"] for row in rows], options.max_new_tokens,
                                      temperature=1.0, top_p=1.0)  # on-policy samples: the estimator needs them
    pairs = [(prompt, completion) for prompt, completion, _ in sampled]
    return k3_kl(backend.completion_logprobs(pairs), reference.completion_logprobs(pairs))


def with_budget(options: EvalOptions, task: Task) -> EvalOptions:
    """`options` with its token budget settled: the one asked for, else the task's own (checked not to cut its
    answers), else FALLBACK_MAX_NEW_TOKENS."""
    # eval_budget: the asked-for budget, else the task's (training's budget plays no part here, hence 0)
    return replace(options, max_new_tokens=eval_budget(task, 0, options.max_new_tokens) or FALLBACK_MAX_NEW_TOKENS)


def check_options(options: EvalOptions) -> None:
    """Refuse settings that cannot produce a result before any model is loaded."""
    for key, name, least in (("max_new_tokens", "--max-new-tokens", 1), ("num_samples", "--num-samples", 0),
                             ("chunk_size", "chunk_size", 1),
                             ("transfer_max_new_tokens", "--transfer-max-new-tokens", 1)):
        value = getattr(options, key)
        if key in ("max_new_tokens", "transfer_max_new_tokens") and value is None:  # the task's own budget
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ConfigError(f"`{key}` ({name}) is {value!r}; it must be a whole number of at least {least}.")
    if options.num_samples and not (options.temperature > 0 and 0 < options.top_p <= 1):
        raise ConfigError(f"sampling needs --temperature > 0 and 0 < --top-p <= 1 (got {options.temperature}, "
                          f"{options.top_p}).")


def evaluate_models(models: list[str], task: Task, options: EvalOptions,
                    load: Callable[[str, str, str, str | None], Backend],
                    quantization_of: Callable[[str, str | None], Any]) -> list[dict]:
    """One result dict per model: task metrics, intervals, avg@k / pass@k, KL; samples and plot if asked.
    `load(model, dtype, device, quantization)` gives a model's backend and `quantization_of(model, requested)`
    the base it is scored on (runs.loading's load_for_eval and eval_quantization)."""
    check_options(options)
    options = with_budget(options, task)
    rows = task.eval_rows
    if not rows:
        raise ConfigError(f"task {task.name!r} has no held-out rows; set `num_eval` or give `eval_dataset`.")
    device = resolve_device(options.device)
    reference = (load(options.kl_reference, options.dtype, device, options.quantization)
                 if options.kl_reference else None)
    results = []
    for model in models:
        started = time.perf_counter()
        backend = (reference if model == options.kl_reference
                   else load(model, options.dtype, device, options.quantization))
        check_prompt_lengths(backend, {"held-out": rows}, options.max_new_tokens)
        metrics, completions, rewards = _greedy(backend, task, rows, options)
        if options.transfer and task.transfer_rows:
            metrics.update(_transfer(backend, task, options))
        if options.num_samples:
            metrics.update(_sampled(backend, task, rows, options))
        if reference is not None:
            metrics.update({"kl_per_token": 0.0, "kl_per_sequence": 0.0} if backend is reference
                           else _kl(backend, reference, rows, options))
        if task.skipped_rows:
            metrics["skipped_rows"] = task.skipped_rows
        results.append({"model": model, "task": task.name, "num_eval": len(rows),
                        "max_new_tokens": options.max_new_tokens,
                        "quantization": quantization_of(model, options.quantization).method, **metrics,
                        "time_s": round(time.perf_counter() - started, 2)})
        if options.samples_path:
            with open(options.samples_path, "a") as handle:
                for row, completion, reward in zip(rows, completions, rewards):
                    handle.write(json.dumps({"model": model, "prompt": row["prompt"], "completion": completion,
                                             "reward": None if np.isnan(reward) else float(reward)}) + "\n")
    if options.plot_path and reference is not None:
        plot_reward_vs_kl(results, options.plot_path, title=f"{task.name}: reward vs KL from {options.kl_reference}")
    return results



"""`evotune eval`: score models side by side on a task's held-out prompts.

Per model: greedy accuracy / mean reward with a 95% interval; optionally avg@k and pass@k from
k sampled completions per prompt (ESSA's tables); optionally the KL divergence from a reference
(base) model, estimated per token with Schulman's k3 estimator on completions sampled from the
evaluated model, as Qiu et al. (arXiv 2509.24372) do for their reward-vs-KL Pareto analysis.

Models may be an alias, a model directory, a .gguf file, a hub id, a PEFT adapter, a run
directory (its final/), or a run's checkpoint/ directory (rebuilt from the run's config).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..backends.base import Backend, resolve_device
from ..config.eval_options import FALLBACK_MAX_NEW_TOKENS, EvalOptions
from ..errors import ConfigError
from .generation import check_prompt_lengths, eval_budget, generate_in_chunks
from ..tasks.base import Task

if TYPE_CHECKING:
    from ..backends.hf import HFBackend


def wilson_interval(successes: float, total: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a proportion (well-behaved near 0 and 1, unlike the normal one)."""
    if total == 0:
        return (float("nan"), float("nan"))
    p = successes / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return (max(0.0, centre - half), min(1.0, centre + half))


def mean_interval(values: np.ndarray, z: float = 1.96) -> tuple[float, float]:
    """Normal-approximation 95% interval of a mean."""
    values = values[~np.isnan(values)]
    if values.size < 2:
        return (float("nan"), float("nan"))
    half = z * values.std(ddof=1) / math.sqrt(values.size)
    return (float(values.mean() - half), float(values.mean() + half))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (Chen et al. 2021): 1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def k3_kl(policy_logprobs: list[torch.Tensor], reference_logprobs: list[torch.Tensor]) -> dict[str, float]:
    """KL(policy || reference) per token from policy samples: mean of (r - 1) - log r, r = p_ref / p_policy.

    k3 is unbiased and, unlike log(p_policy / p_ref), never negative per token (Schulman, 2020).
    """
    per_token = [torch.expm1(ref - pol) - (ref - pol) for pol, ref in zip(policy_logprobs, reference_logprobs)]
    tokens = torch.cat(per_token) if per_token else torch.zeros(0)
    per_sequence = [float(t.sum()) for t in per_token]
    return {"kl_per_token": float(tokens.mean()) if tokens.numel() else float("nan"),
            "kl_per_sequence": float(np.mean(per_sequence)) if per_sequence else float("nan"),
            "kl_tokens": int(tokens.numel())}


def load_for_eval(model: str, dtype: str, device: str, quantization: str | None = None) -> Any:
    """A backend for `model`; a run's checkpoint/ directory is rebuilt from the run's config and mean.

    quantization: the base's (none / int8 / int4); None: the run's own (eval_quantization)."""
    from ..backends import HFBackend

    path = Path(model)
    settings = eval_quantization(model, quantization)
    if is_checkpoint_directory(path):
        return _load_checkpoint(path, dtype, device, settings)
    require_final(path)
    if (path / "final" / "config.json").exists():  # a full-parameter run directory
        return HFBackend.load(str(path / "final"), dtype, device, quantization=settings)
    return HFBackend.load(model, dtype, device, quantization=settings)


def eval_quantization(model: str, requested: str | None) -> Any:
    """QuantizationSettings for evaluating `model`: its run's own (the config.yaml of a run directory, or beside
    a final/, checkpoint/ or sft adapter/) unless `requested` names another method, which then takes the
    default int4 choices. An adapter evolved on an INT4 base is evaluated on that base unless told otherwise."""
    import yaml

    from ..backends.quantized import QuantizationSettings

    path = Path(model)
    recorded = QuantizationSettings()
    in_run = path.name == "final" or (path / "adapter_config.json").exists() or is_checkpoint_directory(path)
    for run_config in (path / "config.yaml", path.parent / "config.yaml") if in_run else (path / "config.yaml",):
        if path.is_dir() and run_config.is_file():
            values = yaml.safe_load(run_config.read_text()) or {}
            recorded = QuantizationSettings(values.get("quantization", "none"), values.get("int4_type", "nf4"),
                                            bool(values.get("int4_double_quantization", False)),
                                            values.get("int4_compute_dtype"))
            break
    if requested is None or requested == recorded.method:
        return recorded
    return QuantizationSettings(requested)


def is_checkpoint_directory(path: Path) -> bool:
    """A checkpoint written by `evotune train` (or its .old sibling, when a save was interrupted)."""
    candidates = (path, path.with_name(path.name + ".old")) if path.name else (path,)
    return any((candidate / name).exists() for candidate in candidates for name in ("state.json", "manifest.json"))


def require_final(path: Path) -> None:
    """Refuse a run directory whose final/ model is missing, naming what can be used instead."""
    path = Path(path)
    if not (path / "config.yaml").is_file() or (path / "config.json").exists():
        return  # not a run directory: the model loader reports what it is missing
    final = path / "final"
    if (final / "config.json").exists() or (final / "adapter_config.json").exists():
        return
    if (path / "adapter" / "adapter_config.json").exists():
        raise ConfigError(f"{path} is an `evotune sft` run directory; its model is the adapter: pass "
                          f"{path / 'adapter'}.")
    state = "has an incomplete final/" if final.exists() else "has no final/ model yet"
    if is_checkpoint_directory(path / "checkpoint"):
        fix = (f"evaluate its last checkpoint with --model {path / 'checkpoint'}, or finish the run with "
               f"`evotune train --output-dir {path} --resume` to write final/")
    else:
        fix = "it has no checkpoint/ either (it stopped before its first one); run it again"
    raise ConfigError(f"{path} is an evotune run directory that {state} (the run has not finished): {fix}.")


def _load_checkpoint(directory: Path, dtype: str, device: str, quantization: Any) -> Any:
    from ..backends import HFBackend
    from ..builders import build_space, on_hf_backend
    from ..runs.checkpoint import find_checkpoint, load_checkpoint, verify_checkpoint
    from ..config.train import load_config
    from ..errors import CheckpointError

    run_config = directory.parent / "config.yaml"
    if not run_config.exists():
        raise ConfigError(f"{directory} looks like a checkpoint but {run_config} is missing; evaluate the run's "
                          "final/ instead, or restore its config.yaml.")
    checkpoint = find_checkpoint(directory)  # falls back to checkpoint.old, with a warning, when damaged
    if checkpoint is None:
        raise CheckpointError(f"checkpoint {directory} is damaged ({verify_checkpoint(directory)}) and no intact "
                              f"previous one ({directory.name}.old) exists; evaluate the run's final/ instead.")
    config = on_hf_backend(load_config(run_config))  # a vLLM run's checkpoint holds HF tensors too
    backend = HFBackend.load(config.model, dtype, device, quantization=quantization)
    space = build_space(config, backend)
    space.load_state_tensors(load_checkpoint(checkpoint)["space_tensors"])
    return backend


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
                             ("chunk_size", "chunk_size", 1)):
        value = getattr(options, key)
        if key == "max_new_tokens" and value is None:  # the task's own budget (with_budget)
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ConfigError(f"`{key}` ({name}) is {value!r}; it must be a whole number of at least {least}.")
    if options.num_samples and not (options.temperature > 0 and 0 < options.top_p <= 1):
        raise ConfigError(f"sampling needs --temperature > 0 and 0 < --top-p <= 1 (got {options.temperature}, "
                          f"{options.top_p}).")


def evaluate_models(models: list[str], task: Task, options: EvalOptions) -> list[dict]:
    """One result dict per model: task metrics, intervals, avg@k / pass@k, KL; samples and plot if asked."""
    check_options(options)
    options = with_budget(options, task)
    rows = task.eval_rows
    if not rows:
        raise ConfigError(f"task {task.name!r} has no held-out rows; set `num_eval` or give `eval_dataset`.")
    device = resolve_device(options.device)
    reference = (load_for_eval(options.kl_reference, options.dtype, device, options.quantization)
                 if options.kl_reference else None)
    results = []
    for model in models:
        started = time.perf_counter()
        backend = (reference if model == options.kl_reference
                   else load_for_eval(model, options.dtype, device, options.quantization))
        check_prompt_lengths(backend, {"held-out": rows}, options.max_new_tokens)
        metrics, completions, rewards = _greedy(backend, task, rows, options)
        if options.num_samples:
            metrics.update(_sampled(backend, task, rows, options))
        if reference is not None:
            metrics.update({"kl_per_token": 0.0, "kl_per_sequence": 0.0} if backend is reference
                           else _kl(backend, reference, rows, options))
        if task.skipped_rows:
            metrics["skipped_rows"] = task.skipped_rows
        results.append({"model": model, "task": task.name, "num_eval": len(rows),
                        "max_new_tokens": options.max_new_tokens,
                        "quantization": eval_quantization(model, options.quantization).method, **metrics,
                        "time_s": round(time.perf_counter() - started, 2)})
        if options.samples_path:
            with open(options.samples_path, "a") as handle:
                for row, completion, reward in zip(rows, completions, rewards):
                    handle.write(json.dumps({"model": model, "prompt": row["prompt"], "completion": completion,
                                             "reward": None if np.isnan(reward) else float(reward)}) + "\n")
    if options.plot_path and reference is not None:
        plot_reward_vs_kl(results, options.plot_path, title=f"{task.name}: reward vs KL from {options.kl_reference}")
    return results


def plot_reward_vs_kl(results: list[dict], path: str, title: str = "") -> None:
    """Each model as a point (KL per token, accuracy or reward): Qiu et al.'s Pareto view."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = "accuracy" if "accuracy" in results[0] else "reward"
    figure, axis = plt.subplots(figsize=(6, 4))
    for index, result in enumerate(results):
        axis.scatter(result["kl_per_token"], result[key], color=f"C{index}", label=result["model"], zorder=3)
    axis.set(xlabel="KL(model || reference) per token (k3)", ylabel=f"held-out {key}", title=title)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def format_table(results: list[dict]) -> str:
    """A plain text table: one row per model, scalar metrics as columns."""
    keys = [key for key in results[0] if key not in ("model", "task") and not isinstance(results[0][key], list)]
    lines = [" | ".join(["model"] + keys)]
    for result in results:
        cells = [result["model"]]
        for key in keys:
            value = result.get(key, "")
            cells.append(f"{value:.4f}" if isinstance(value, float) else str(value))
            if f"{key}_ci95" in result:
                low, high = result[f"{key}_ci95"]
                cells[-1] += f" [{low:.3f}, {high:.3f}]"
        lines.append(" | ".join(cells))
    return "\n".join(lines)

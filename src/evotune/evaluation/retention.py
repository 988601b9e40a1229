"""Retention of other abilities while training: the run's `retention_tasks` scored at every evaluation.

Training on one task can cost others (the drift that ES at Scale, arXiv 2509.24372, measures as KL from the base
model). Every evaluation of `evotune train` (any space or backend), `evotune grpo` and `evotune sft` also scores
the current model on each retention task's own held-out prompts, greedy, at that task's evaluation budget, and
logs `retain/<task>/<metric>`; with `retention_kl`, also `retain/<task>/kl`: the per-token k3 KL of the model to
the base model (evaluation.k3_kl, the estimator of `evotune eval --kl-reference`) on the model's greedy
retention completions. Greedy completions are what the metrics score, so the KL is measured where the metrics
are; it is a drift measure there, not `evotune eval`'s unbiased estimate from sampled completions.

The base model for the KL, without a second copy where one can be avoided: a PEFT model (adapter spaces,
GRPO's and SFT's LoRA) is its own base with the adapter switched off; a full-weights model (full / lowrank,
full GRPO) is compared with one more copy of the base model, loaded once at the model's dtype and device.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..backends.base import Backend
from ..backends.hf import render_prompt
from ..config.train import RunConfig
from ..errors import ConfigError
from ..tasks import Task, get_task
from .generation import check_prompt_lengths, eval_budget, evaluate_model
from .kl import k3_kl

if TYPE_CHECKING:
    import torch

    from ..backends.hf import HFBackend

RETAIN_PREFIX = "retain/"
Pairs = list[tuple[list[int], list[int]]]  # (prompt token ids, completion token ids) per row


class Reference(Protocol):
    """The base model's log-probabilities of completion tokens, for the KL of `backend`'s model to it."""

    def logprobs(self, backend: HFBackend, pairs: Pairs) -> list[torch.Tensor]:
        """log p_base(completion token t | prompt, tokens < t), fp32 (len,) per pair."""


class DisabledAdapter:
    """The base as the policy's own PEFT model with its adapter switched off: no second copy of the weights."""

    def logprobs(self, backend: HFBackend, pairs: Pairs) -> list[torch.Tensor]:
        with backend.model.disable_adapter():
            return backend.completion_logprobs(pairs)


class BaseModelCopy:
    """A second copy of the base model: `model` (a name or directory) loaded on first use, at the policy's dtype
    and on its device (where the policy is when it is first evaluated: GRPO's moves to the GPU after building)."""

    def __init__(self, model: str):
        self.model = model
        self.backend: HFBackend | None = None

    def logprobs(self, backend: HFBackend, pairs: Pairs) -> list[torch.Tensor]:
        if self.backend is None:
            from ..backends import HFBackend

            dtype = str(backend.model.dtype).removeprefix("torch.")
            self.backend = HFBackend.load(self.model, dtype, str(backend.device))
        return self.backend.completion_logprobs(pairs)


def reference_for(model: Any, base_model: str) -> Reference:
    """DisabledAdapter for a PEFT model, else a BaseModelCopy of `base_model`."""
    return DisabledAdapter() if hasattr(model, "disable_adapter") else BaseModelCopy(base_model)


def build_retention_tasks(config: RunConfig) -> list[Task]:
    """Each retention task with its default task_args and its own held-out split (seeded by the data seed)."""
    tasks = []
    for name in config.retention_tasks:
        try:
            tasks.append(get_task(name, seed=config.data_seed_or_seed, num_eval=config.retention_num_eval))
        except ConfigError as exc:  # e.g. more prompts than conciseness holds: name the key that asked for them
            raise ConfigError(f"`retention_num_eval` {config.retention_num_eval} for the retention task {name}: "
                              f"{exc}") from exc
    return tasks


class Retention:
    """Scores a backend's current model on the retention tasks: `retain/<task>/<metric>` (and `/kl`)."""

    def __init__(self, tasks: list[Task], max_new_tokens: int, reference: Reference | None = None):
        self.tasks = tasks
        self.budgets = {task.name: eval_budget(task, max_new_tokens) for task in tasks}  # each task's own
        self.reference = reference

    def check_prompt_lengths(self, backend: Backend) -> None:
        """Refuse retention prompts that do not fit the model's context with their budget, before training."""
        for task in self.tasks:
            check_prompt_lengths(backend, {f"{task.name} retention": task.eval_rows}, self.budgets[task.name])

    def evaluate(self, backend: Backend) -> dict[str, float]:
        records: dict[str, float] = {}
        for task in self.tasks:
            metrics, completions = evaluate_model(backend, task, task.eval_rows, self.budgets[task.name])
            records.update(retain_record(task.name, metrics))
            if self.reference is not None:
                records[f"{RETAIN_PREFIX}{task.name}/kl"] = self.kl(backend, task.eval_rows, completions)
        return records

    def kl(self, backend: HFBackend, rows: list[dict], completions: list[str]) -> float:
        """Per-token k3 KL(model || base) on the completions (their text tokenized again, as both models see it)."""
        pairs = token_pairs(backend.tokenizer, rows, completions)
        return k3_kl(backend.completion_logprobs(pairs), self.reference.logprobs(backend, pairs))["kl_per_token"]


def token_pairs(tokenizer: Any, rows: list[dict], completions: list[str]) -> Pairs:
    """(prompt ids, completion ids) per row: the prompt rendered as generation renders it (chat template)."""
    prompts = tokenizer([render_prompt(tokenizer, row["prompt"]) for row in rows], add_special_tokens=False)
    answers = tokenizer(list(completions), add_special_tokens=False)
    return list(zip(prompts["input_ids"], answers["input_ids"]))


def retain_record(task: str, metrics: dict[str, float]) -> dict[str, float]:
    """A retention task's metrics under their metrics.jsonl keys (`reward` of ifeval -> `retain/ifeval/reward`)."""
    return {f"{RETAIN_PREFIX}{task}/{key}": value for key, value in metrics.items()}


def build_retention(config: RunConfig, backend: Backend, reference: Reference | None = None) -> Retention | None:
    """The run's Retention (None when `retention_tasks` is empty), its prompts checked against the model's
    context. `reference`: the KL's base model (default: reference_for the backend's model and `model`)."""
    if not config.retention_tasks:
        return None
    if config.retention_kl and reference is None:
        reference = reference_for(backend.model, config.model)
    retention = Retention(build_retention_tasks(config), config.max_new_tokens,
                          reference if config.retention_kl else None)
    retention.check_prompt_lengths(backend)
    return retention

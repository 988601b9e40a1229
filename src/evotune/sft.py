"""LoRA supervised fine-tuning: stage 1 of ESSA, the warm start that evolution then refines.

ESSA (Korotyshova, Shaposhnikov et al., "ESSA: Evolutionary Strategies for Scalable Alignment",
arXiv 2507.04453) first trains a LoRA adapter on Q/K/V/O with ordinary SFT, then searches only
the singular values of its factors with CMA-ES (`evotune train` with `space: svd_lora` and
`adapter: DIR/adapter`). ES can only move inside the subspace this adapter spans, so stage 1
should leave a model that is better than the base but not solved.

Data is TRL's prompt-completion format: the prompt gets the chat template exactly as at
generation time, the completion and EOS follow, and the loss covers only completion + EOS.
The run directory follows `evotune train`: config.yaml, metrics.jsonl (one record per optimizer
step, eval records at step 0 and the last step), TensorBoard, loss.png, adapter/ (a standard
PEFT adapter plus the tokenizer; `peft.PeftModel.from_pretrained(base, DIR/adapter)` reloads it), and
checkpoint/ every `checkpoint_every` steps (the adapter's weights, AdamW's moments, the learning-rate
schedule, the losses so far and the RNG state, in train's checksummed checkpoint format), from which
`evotune sft --resume` continues an interrupted run to the same adapter, tensor for tensor.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .backends import HFBackend
from .backends.hf import render_prompt
from .config.checks import resolve_device
from .config.files import absolutize_paths, read_config_values
from .config.sft import SFTConfig
from .errors import CheckpointError, ConfigError, DataError
from .evaluation.generation import eval_budget, eval_record, evaluate_model
from .files.checkpoint import find_checkpoint, load_checkpoint, save_checkpoint
from .runs.directory import RESUMABLE_KEYS, check_resume, read_run_config, refuse_other_commands_run
from .runs.lifecycle import RunLifecycle
from .spaces.lora import init_lora_adapter
from .tasks import get_task
from .tasks.data import load_rows, validate_rows
from .tracking.tracker import MetricsLogger, read_metrics

if TYPE_CHECKING:  # heavy imports (torch, transformers) only where used
    from .backends.hf import HFBackend
    from .evaluation.retention import Retention
    from .tasks.base import Task
    from .tracking.tracker import MetricsLogger

# What a run writes in its OUTPUT_DIR: an earlier run's are refused, continued by --resume, or removed by --overwrite.
SFT_RUN_FILES = ("adapter", "config.yaml", "metrics.jsonl", "samples.jsonl", "loss.png", "tensorboard", "checkpoint",
                 "checkpoint.old", "checkpoint.tmp")
IGNORE_INDEX = -100  # label of tokens without loss (prompt, padding), as in transformers


# Keys a resumed run may change: train's (runs/directory.py) that SFT has; none changes the adapter's trajectory.
SFT_RESUMABLE_KEYS = tuple(key for key in RESUMABLE_KEYS if key in SFTConfig.__dataclass_fields__)


def load_sft_config(path: str | Path | None, overrides: list[str] | None = None,
                    resume_dir: str | Path | None = None) -> SFTConfig:
    """YAML file (optional) <- --set overrides, then validated; with `resume_dir`, on top of that run's own
    config.yaml (what it was started with)."""
    base = None
    if resume_dir is not None:
        base = read_run_config(Path(resume_dir))
        refuse_other_commands_run(base, Path(resume_dir), "sft")
        foreign = sorted(set(base) - set(SFTConfig.__dataclass_fields__))
        if foreign:
            raise ConfigError(f"--resume: {Path(resume_dir) / 'config.yaml'} has keys SFT does not know "
                              f"({', '.join(foreign[:4])}): it is not an `evotune sft` run (an `evotune train` run "
                              f"resumes with `evotune train --output-dir {resume_dir} --resume`).")
    values, source = read_config_values(path, overrides, base=base)
    return SFTConfig.from_dict(values, source=source)


def check_sft_resume(output_dir: Path, config: SFTConfig) -> None:
    """Refuse a resume whose config changes a key that would change the run (only SFT_RESUMABLE_KEYS may)."""
    check_resume(Path(output_dir), config, SFT_RESUMABLE_KEYS, command="sft")


def inspect_sft_run(run: RunLifecycle, config: SFTConfig) -> Path | None:
    """`evotune sft`'s checks of its directory (RunLifecycle's inspect; reads only): the checkpoint to resume from,
    or None for a new run."""
    checkpoint = find_checkpoint(run.output_dir / "checkpoint")
    if not run.resume:
        run.refuse_existing(resumable=checkpoint is not None)
        return None
    if checkpoint is None:
        raise ConfigError(f"--resume: no complete checkpoint in {run.output_dir / 'checkpoint'} (the run stopped "
                          "before its first one, or it has `checkpoint_every: 0`); start it again with "
                          "--overwrite, or choose a new --output-dir.")
    check_sft_resume(run.output_dir, config)
    return checkpoint


def sft_run(output_dir: str | Path, config: SFTConfig, resume: bool = False, overwrite: bool = False) -> RunLifecycle:
    """The lifecycle of an `evotune sft` run directory (runs/lifecycle.py)."""
    return RunLifecycle(output_dir, SFT_RUN_FILES, resume, overwrite, inspect=lambda run: inspect_sft_run(run, config),
                        what="an earlier run's")


def _optimizer_steps_logged(output_dir: Path) -> int:
    """Training steps metrics.jsonl records (a run that failed before the first one leaves nothing)."""
    path = output_dir / "metrics.jsonl"
    return path.read_text(errors="replace").count('"loss"') if path.is_file() else 0


def dataset_completion(row: dict, number: int, source: str) -> str:
    """A row's `completion`: a string, or TRL's conversational [{"role": "assistant", "content": ...}]."""
    if "completion" not in row:
        raise DataError(f"Dataset {source!r} has no `completion` column (row {number} has columns {sorted(row)}); "
                        "SFT data is TRL's prompt-completion format: add a `completion` column.")
    completion = row["completion"]
    if isinstance(completion, list) and len(completion) == 1 and isinstance(completion[0], dict) \
            and completion[0].get("role") == "assistant":
        completion = completion[0].get("content")
    if not isinstance(completion, str) or not completion.strip():
        raise DataError(f"Dataset {source!r}, row {number}, column `completion`: got {completion!r:.120}; it must be "
                        "a non-empty string or a list with one assistant message.")
    return completion


def sft_rows(config: SFTConfig) -> tuple[list[dict], Any]:
    """(rows with `prompt` and `completion` to train on, the task evaluated before/after or None)."""
    task = None
    if config.task is not None:
        task = get_task(config.task, seed=config.data_seed_or_seed, num_eval=config.num_eval, **config.task_args)
    if config.dataset is not None:
        rows = load_rows(config.dataset)
        validate_rows(rows, config.dataset)
        rows = [{"prompt": row["prompt"], "completion": dataset_completion(row, number, config.dataset)}
                for number, row in enumerate(rows, start=1)]
    else:
        rows = []
        for row in task.train_rows:
            # `solution` (a full worked answer) teaches more than a bare `answer` when a row has both.
            target = next((name for name in ("solution", "answer") if row.get(name) not in (None, "")), None)
            if target is None:
                raise ConfigError(f"task {config.task!r} has a row with no `solution` or `answer` to learn from (its "
                                  f"columns: {sorted(row)}); give SFT data as `dataset` with `prompt` and `completion` "
                                  "columns.")
            rows.append({"prompt": row["prompt"], "completion": str(row[target])})
    if not rows:
        raise ConfigError(f"task {config.task!r} has no training rows; raise its `num_train` in `task_args`.")
    return rows[:config.num_train], task  # num_train None keeps every row


def encode_example(tokenizer: Any, prompt: Any, completion: str) -> dict[str, list[int]]:
    """Token ids of prompt + completion + EOS; labels are IGNORE_INDEX on the prompt (no loss there).

    Prompt and completion are tokenized apart so the prompt tokens are exactly what generation
    sees (HFBackend renders and encodes prompts the same way), and EOS teaches the model to stop.
    """
    prompt_ids = tokenizer(render_prompt(tokenizer, prompt), add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return {"input_ids": prompt_ids + completion_ids, "labels": [IGNORE_INDEX] * len(prompt_ids) + completion_ids}


def collate(examples: list[dict[str, list[int]]], pad_token_id: int) -> dict[str, Any]:
    """Right-padded (batch, length) tensors; padding is masked from attention and from the loss."""
    import torch

    length = max(len(example["input_ids"]) for example in examples)

    def pad(values: list[int], fill: int) -> list[int]:
        return values + [fill] * (length - len(values))

    return {"input_ids": torch.tensor([pad(e["input_ids"], pad_token_id) for e in examples]),
            "attention_mask": torch.tensor([pad([1] * len(e["input_ids"]), 0) for e in examples]),
            "labels": torch.tensor([pad(e["labels"], IGNORE_INDEX) for e in examples])}


def train_adapter(model: Any, examples: list[dict], pad_token_id: int, config: SFTConfig, logger: Any,
                  resume: dict[str, Any] | None = None,
                  checkpoint: Callable[[Any, Any, list[float]], None] | None = None) -> list[float]:
    """AdamW on the parameters that require grad (the LoRA factors); logs and returns each step's loss.

    `resume` (read_sft_checkpoint's optimizer, schedule, losses and RNG state) continues after its last step: the
    batches of the steps done are skipped in the same seeded order, so the run goes on as if never stopped.
    `checkpoint(optimizer, schedule, losses)` is called every `checkpoint_every` steps before the last."""
    import torch
    from tqdm.auto import tqdm

    parameters = [parameter for parameter in model.parameters() if parameter.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=config.learning_rate, weight_decay=config.weight_decay)
    steps_per_epoch = math.ceil(len(examples) / config.batch_size)
    total = config.max_steps or steps_per_epoch * config.epochs
    warmup = config.warmup_steps
    # transformers' default schedule: linear warmup, then linear decay that reaches 0 after the last step.
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: step / warmup if step < warmup
                                                 else max(0.0, (total - step) / max(1, total - warmup)))
    device = next(model.parameters()).device
    losses: list[float] = []
    if resume is not None:
        optimizer.load_state_dict(resume["optimizer"])
        schedule.load_state_dict(resume["schedule"])
        losses = list(resume["losses"])
        torch.set_rng_state(resume["rng"])
    done, position = len(losses), 0
    model.train()
    with tqdm(total=total, initial=done, desc="evotune sft", unit="step", dynamic_ncols=True) as bar:
        for epoch in range(math.ceil(total / steps_per_epoch)):  # max_steps may need more than `epochs`
            order = list(range(len(examples)))
            random.Random(f"sft-{config.data_seed_or_seed}-{epoch}").shuffle(order)
            for start in range(0, len(order), config.batch_size):
                if len(losses) == total:
                    break
                position += 1
                if position <= done:  # a resumed run: this batch's step is in the checkpoint already
                    continue
                started = time.perf_counter()
                batch = collate([examples[index] for index in order[start:start + config.batch_size]], pad_token_id)
                loss = model(**{key: value.to(device) for key, value in batch.items()}).loss  # completion-token mean
                loss.backward()
                if config.max_grad_norm > 0:
                    torch.nn.utils.clip_grad_norm_(parameters, config.max_grad_norm)
                learning_rate = schedule.get_last_lr()[0]
                optimizer.step()
                schedule.step()
                optimizer.zero_grad(set_to_none=True)
                losses.append(loss.item())
                logger.log({"step": len(losses), "epoch": round(len(losses) / steps_per_epoch, 4),
                            "loss": losses[-1], "learning_rate": learning_rate,
                            "time_s": time.perf_counter() - started})
                bar.update(1)
                bar.set_postfix({"loss": f"{losses[-1]:.4f}"})
                if checkpoint and config.checkpoint_every and len(losses) % config.checkpoint_every == 0 \
                        and len(losses) < total:
                    checkpoint(optimizer, schedule, losses)
    model.eval()
    return losses


def _trainable(model: Any) -> dict[str, Any]:
    return {name: parameter for name, parameter in model.named_parameters() if parameter.requires_grad}


def write_sft_checkpoint(directory: Path, model: Any, optimizer: Any, schedule: Any, losses: list[float]) -> None:
    """The state a resume needs, in train's checksummed checkpoint format (runs/checkpoint.py; its required
    `strategy.iteration` is the step): the adapter's trainable tensors, AdamW's per-parameter state, the torch RNG
    state, and as JSON the step, the losses, the optimizer's parameter groups and the schedule's state."""
    import torch


    saved = optimizer.state_dict()
    optimizer_tensors = {f"{index}.{key}": value for index, state in saved["state"].items()
                         for key, value in state.items() if torch.is_tensor(value)}
    optimizer_scalars = {f"{index}.{key}": value for index, state in saved["state"].items()
                         for key, value in state.items() if not torch.is_tensor(value)}
    optimizer_tensors["rng.torch"] = torch.get_rng_state()
    state = {"iteration": len(losses), "strategy": {"iteration": len(losses)}, "command": "sft", "losses": losses,
             "param_groups": saved["param_groups"], "optimizer_scalars": optimizer_scalars,
             "schedule": schedule.state_dict()}
    save_checkpoint(directory, state, _trainable(model), optimizer_tensors, update_log=[])


def read_sft_checkpoint(directory: Path, model: Any) -> dict[str, Any]:
    """Load a checkpoint's adapter tensors into `model` (the freshly initialized adapter) and return what
    train_adapter's `resume` takes."""
    loaded = load_checkpoint(directory)
    state, tensors = loaded["state"], loaded["space_tensors"]
    if state.get("command") != "sft":
        raise CheckpointError(f"{directory} is not an `evotune sft` checkpoint (it has no `command: sft`).")
    trainable = _trainable(model)
    if set(trainable) != set(tensors):
        raise CheckpointError(f"{directory} holds the adapter tensors {sorted(set(tensors) - set(trainable))[:3]} "
                              f"the model does not train, or lacks {sorted(set(trainable) - set(tensors))[:3]}; "
                              "the run's config.yaml and its checkpoint disagree.")
    for name, parameter in trainable.items():
        parameter.data.copy_(tensors[name])
    per_parameter: dict[int, dict[str, Any]] = {}
    for key, value in [*loaded["optimizer_tensors"].items(), *state["optimizer_scalars"].items()]:
        index, _, name = key.partition(".")
        if index != "rng":
            per_parameter.setdefault(int(index), {})[name] = value
    return {"optimizer": {"state": per_parameter, "param_groups": state["param_groups"]},
            "schedule": state["schedule"], "losses": state["losses"], "rng": loaded["optimizer_tensors"]["rng.torch"],
            "step": state["iteration"]}


def evaluate_and_log(backend: HFBackend, task: Task | None, config: SFTConfig, logger: MetricsLogger,
                     step: int, retention: Retention | None = None) -> dict[str, float]:
    """Greedy held-out metrics of the backend's current model (and the retention tasks' `retain/` records), as
    `evotune train` evaluates; logged at `step`. Returns the task's metrics."""
    backend.model.eval()
    metrics = {}
    if task is not None and task.eval_rows:
        metrics, _ = evaluate_model(backend, task, task.eval_rows,
                                    eval_budget(task, config.max_new_tokens, config.eval_max_new_tokens))
    logger.log({"step": step, **eval_record(metrics), **(retention.evaluate(backend) if retention else {})})
    return metrics


def plot_loss(metrics_path: Path, output_png: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    records = [record for record in read_metrics(metrics_path) if "loss" in record]
    figure, axis = plt.subplots(figsize=(6, 3.6))
    axis.plot([r["step"] for r in records], [r["loss"] for r in records])
    axis.set(xlabel="optimizer step", ylabel="loss (completion tokens)", title=title)
    figure.tight_layout()
    figure.savefig(output_png, dpi=110)
    plt.close(figure)
    return Path(output_png)


def run_sft(config: SFTConfig, output_dir: str | Path, backend: HFBackend | None = None,
            overwrite: bool = False, resume: bool = False) -> dict[str, Any]:
    """Stage 1 end to end; returns the summary (also printed by `evotune sft`).

    An OUTPUT_DIR that holds an earlier run's files is refused unless `overwrite`, which removes them
    first (the directory's other files stay), or `resume`, which continues that run from its last checkpoint
    (`config` must then be the run's own, as `load_sft_config(..., resume_dir=OUTPUT_DIR)` reads it: only
    SFT_RESUMABLE_KEYS may differ) and ends with the adapter the uninterrupted run would have written.

    `backend` (an HFBackend, for tests and notebooks) replaces loading `config.model`; afterwards
    its `.model` is the trained PeftModel, as `evotune train` does for adapter spaces.
    """
    output_dir = Path(output_dir)
    absolutize_paths(config)
    run = sft_run(output_dir, config, resume, overwrite)
    run.inspect()  # every refusal before anything is written
    with run.opened(config, lambda: _optimizer_steps_logged(output_dir)):
        return _run_sft(config, run, backend)


def _run_sft(config: SFTConfig, run: RunLifecycle, backend: HFBackend | None) -> dict[str, Any]:
    from .backends.quantized import QuantizationSettings
    from .evaluation.retention import build_retention

    output_dir, checkpoint = run.output_dir, run.checkpoint
    started = time.perf_counter()
    rows, task = sft_rows(config)  # data errors surface before the model loads
    backend = backend or HFBackend.load(config.model, config.dtype, resolve_device(config.device),
                                        quantization=QuantizationSettings.from_config(config))
    if config.quantization != "none":
        from .backends.quantized import keep_trainable_layout

        keep_trainable_layout(backend.model)  # before the first evaluation: gradients must pass the 4-bit base
    examples = [encode_example(backend.tokenizer, row["prompt"], row["completion"]) for row in rows]
    backend.model = init_lora_adapter(backend.model, config.lora_rank, config.lora_target_modules, config.lora_alpha,
                                      config.lora_init, config.seed)
    retention = build_retention(config, backend)  # the KL's base: this adapter switched off
    state = read_sft_checkpoint(checkpoint, backend.model) if checkpoint else None
    logger = MetricsLogger(output_dir, config.report_to, resume_iteration=state["step"] if state else None,
                           step_key="step", config=config.to_dict())
    summary: dict[str, Any] = {"output_dir": str(output_dir), "examples": len(examples)}
    if state:
        summary["resumed_from_step"] = state["step"]
    has_eval = task is not None and len(task.eval_rows) > 0

    def save(optimizer: Any, schedule: Any, losses: list[float]) -> None:
        write_sft_checkpoint(output_dir / "checkpoint", backend.model, optimizer, schedule, losses)

    try:
        if state and (has_eval or retention):  # the run's first evaluation, logged before it stopped
            first = next((record for record in read_metrics(logger.path) if record.get("step") == 0
                          and "loss" not in record), {})
            summary["eval_before"] = {key.removeprefix("eval/"): value for key, value in first.items()
                                      if key.startswith("eval/")}
        elif has_eval or retention:  # with lora_init kaiming the adapter starts as a no-op: this scores the base
            summary["eval_before"] = evaluate_and_log(backend, task, config, logger, 0, retention)
        losses = train_adapter(backend.model, examples, backend.tokenizer.pad_token_id, config, logger, state, save)
        if has_eval or retention:
            summary["eval_after"] = evaluate_and_log(backend, task, config, logger, len(losses), retention)
    finally:
        logger.close()
    with run.staged("adapter") as adapter:  # moved into place whole: a kill leaves no half-written adapter
        backend.model.save_pretrained(adapter)
        backend.tokenizer.save_pretrained(adapter)
    summary.update(steps=len(losses), loss_first=losses[0], loss_last=losses[-1],
                   time_s=round(time.perf_counter() - started, 1), adapter=str(output_dir / "adapter"))
    title = f"LoRA SFT of {Path(config.model).name}"
    if has_eval:
        metric = "accuracy" if "accuracy" in summary["eval_before"] else "reward"
        title += f"; {metric} {summary['eval_before'][metric]:.3f} -> {summary['eval_after'][metric]:.3f}"
    plot_loss(logger.path, output_dir / "loss.png", title)
    return summary

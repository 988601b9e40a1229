"""`evotune grpo`: the GRPO baseline, run by TRL's GRPOTrainer on evotune's config vocabulary.

Both founding papers judge ES against GRPO (ESSA: verl's GRPO; Qiu et al.: PPO, GRPO, Dr.GRPO).
This module runs the baseline with the same models, tasks, reward functions and held-out
evaluation as `evotune train`, and writes the same run directory (config.yaml, metrics.jsonl with
`samples_seen`, `time_s`, `eval/<metric>`; final/; TensorBoard), so `evotune eval` and
`evotune compare` treat both methods alike. TRL is imported only here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import yaml

from ..config import DtypeName, RunConfig, TrainConfig, check_rewards, read_config_values
from ..config_fields import _opt, _same_as
from ..errors import ConfigError
from ..import_utils import is_trl_available
from ..run_directory import RESUMABLE_KEYS, changed_keys, read_run_config

LossType = Literal["grpo", "dr_grpo", "dapo", "bnpo"]  # TRL's loss types
LOSS_TYPES = get_args(LossType)
# What `evotune grpo` writes into a run directory: only these are removed by --overwrite.
GRPO_ARTIFACTS = ("config.yaml", "metrics.jsonl", "trl", "final", "tensorboard", "curves.png", "loggers.json")


@dataclass
class GRPORunConfig(RunConfig):
    """`evotune train`'s vocabulary (the RunConfig keys and the reward keys) plus GRPO's own."""

    KIND = "GRPO"

    eval_dataset: str | None = _same_as(TrainConfig, "eval_dataset")
    reward_fns: list[str] = _same_as(TrainConfig, "reward_fns")
    reward_weights: list[float] = _same_as(TrainConfig, "reward_weights")
    dtype: DtypeName = _opt("float32", "Base weights dtype (the LoRA adapter stays fp32). bfloat16 measured ~1.5x "
                                       "faster GRPO steps than float32 on one 2-core CPU (examples/grpo_*.yaml) but "
                                       "~1.3x slower on one with avx512_bf16 and no AMX (bench/results/"
                                       "dtype_speed_*); auto picks as for train.")
    # GRPO itself (defaults from the papers: group 8, learning rate 1e-5 for LoRA / 1e-6 full)
    iterations: int = _same_as(TrainConfig, "iterations", 20)
    max_training_seconds: float = _same_as(TrainConfig, "max_training_seconds")
    batch_size: int = _opt(4, "Prompts per step; each gets `num_generations` sampled completions.")
    num_generations: int = _opt(8, "Group size G (completions per prompt); the papers use 8 or 30.")
    gradient_accumulation_steps: int = _opt(1, "Micro-batches per step: the batch_size x num_generations completions "
                                               "are generated at once, then the loss runs over this many slices "
                                               "(the same update, less peak memory).")
    learning_rate: float = _opt(1e-5, "AdamW learning rate (GRPO is sensitive to it: see --sweep-learning-rates).")
    beta: float = _opt(0.0, "KL penalty to the reference model (0: none, TRL's default; 0.04: classic GRPO).")
    loss_type: LossType = _opt("grpo", "TRL's loss type (dr_grpo: Dr. GRPO).")
    temperature: float = _opt(1.0, "Sampling temperature of the training completions.")
    lora: bool = _opt(True, "Train a LoRA adapter (False: all parameters).")
    adapter: str | None = _opt(None, "PEFT adapter directory to continue training (e.g. an `evotune sft` run's "
                                     "adapter/), so GRPO starts from the same weights as ESSA on that adapter; "
                                     "its own rank, alpha and target modules apply. None: a fresh LoRA.")
    # loop and outputs
    eval_every: int = _same_as(TrainConfig, "eval_every", 5)
    checkpoint_every: int = _same_as(TrainConfig, "checkpoint_every")
    method: str = _opt("grpo", "Label of this run in `evotune compare`.")

    def validate(self) -> None:
        super().validate()
        check_rewards(self)
        if self.batch_size < 1:
            raise ConfigError(f"`batch_size` is {self.batch_size}; it must be at least 1.")
        completions = self.batch_size * self.num_generations
        if self.gradient_accumulation_steps < 1 or completions % self.gradient_accumulation_steps:
            raise ConfigError(f"`gradient_accumulation_steps` is {self.gradient_accumulation_steps}; it must divide "
                              f"the {completions} completions of a step (batch_size x num_generations), e.g. 2 or 4.")
        if self.num_generations < 2:
            raise ConfigError(f"`num_generations` is {self.num_generations}; GRPO compares a group of completions "
                              "of one prompt, so it needs at least 2 (the papers use 8 or 30).")
        if not self.learning_rate > 0:
            raise ConfigError(f"`learning_rate` is {self.learning_rate}; it must be > 0 (e.g. 1e-5).")
        if self.beta < 0:
            raise ConfigError(f"`beta` is {self.beta}; use 0 (no KL term) or a positive weight such as 0.04.")
        if not self.temperature > 0:
            raise ConfigError(f"`temperature` is {self.temperature}; sampling needs a temperature > 0 (e.g. 1.0).")
        if self.adapter is not None and not self.lora:
            raise ConfigError("`adapter` continues training a LoRA adapter, but `lora` is false (all parameters); "
                              "set `lora: true`, or remove `adapter`.")
        # config.yaml records absolute paths, so the run resumes and evaluates from any working directory
        self.adapter = _absolute(self.adapter) if self.adapter is not None else None
        if os.path.exists(os.path.expanduser(self.model)):  # a local model (not an alias or hub id)
            from ..backends.models import ALIASES

            self.model = self.model if self.model in ALIASES else _absolute(self.model)


def _absolute(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path))


def load_grpo_config(path: str | None, overrides: list[str], resume_dir: str | Path | None = None) -> GRPORunConfig:
    """CONFIG <- --set; with `resume_dir`, on top of that run's own config.yaml (what it was started with)."""
    base = None
    if resume_dir is not None:
        base = read_run_config(Path(resume_dir))
        foreign = sorted(set(base) - {field.name for field in dataclasses.fields(GRPORunConfig)})
        if foreign:
            raise ConfigError(f"--resume: {Path(resume_dir) / 'config.yaml'} has keys GRPO does not know "
                              f"({', '.join(foreign[:4])}): it is not an `evotune grpo` run (an `evotune train` run "
                              f"resumes with `evotune train --output-dir {resume_dir} --resume`).")
    values, source = read_config_values(path, overrides, base=base)
    return GRPORunConfig.from_dict(values, source=source)


def _dataset(rows: list[dict]) -> Any:
    from datasets import Dataset

    return Dataset.from_list(rows)


def _policy(config: GRPORunConfig) -> tuple[Any, Any]:
    """The model GRPO trains (with `adapter`: that PEFT adapter, trainable, on the base) and its tokenizer."""
    from ..backends.models import load_model

    model, tokenizer = load_model(config.model, config.dtype, "cpu")
    if config.adapter is not None:  # continue this adapter (TRL trains a PeftModel it is given as is)
        from peft import PeftModel

        from ..adapters import check_adapter

        check_adapter(config.adapter, model, config.model)  # a clear error before PEFT's own
        model = PeftModel.from_pretrained(model, config.adapter, adapter_name="default", is_trainable=True)
    model.train()
    tokenizer.padding_side = "left"  # batched generation pads on the left
    return model, tokenizer


def _grpo_arguments(config: GRPORunConfig, output: Path, reward_weights: list[float]) -> Any:
    """TRL's GRPOConfig for this run: one optimizer step per iteration, evotune's checkpoints and seed."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(output / "trl"), learning_rate=config.learning_rate, max_steps=config.iterations,
        per_device_train_batch_size=config.batch_size * config.num_generations // config.gradient_accumulation_steps,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        num_generations=config.num_generations, max_completion_length=config.max_new_tokens,
        temperature=config.temperature, beta=config.beta, loss_type=config.loss_type,
        reward_weights=reward_weights, seed=config.seed, logging_steps=1,
        save_steps=config.checkpoint_every, report_to="none", use_cpu=not _cuda(), bf16=False,
        lr_scheduler_type="constant", disable_dropout=True,
        gradient_checkpointing=False)  # small models: recomputation costs more than the memory it saves


def run_grpo(config: GRPORunConfig, output_dir: str, resume: bool = False) -> dict[str, Any]:
    """Train with TRL's GRPOTrainer; returns the last held-out metrics."""
    if not is_trl_available():
        raise ConfigError("`evotune grpo` runs TRL's GRPOTrainer: pip install 'evotune[grpo]'.")
    from peft import LoraConfig
    from trl import GRPOTrainer

    from ..backends import HFBackend
    from ..backends.hf import contiguous_head_input
    from ..tasks import get_task
    from ..tracking import MetricsLogger, plot_curves
    from .grpo_logging import EvotuneMetricsCallback

    output = Path(output_dir)
    if (output / "metrics.jsonl").exists() and not resume:
        raise ConfigError(f"{output} already holds a run; pass --resume to continue it, or choose a new --output-dir.")
    output.mkdir(parents=True, exist_ok=True)
    (output / "config.yaml").write_text(yaml.safe_dump(dataclasses.asdict(config), sort_keys=False))
    task = get_task(config.task, seed=config.seed, num_eval=config.num_eval, dataset=config.dataset,
                    eval_dataset=config.eval_dataset, reward_fns=config.reward_fns or None,
                    reward_weights=config.reward_weights or None, **config.task_args)
    model, tokenizer = _policy(config)
    arguments = _grpo_arguments(config, output, list(task.reward_weights))
    peft_config = (LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, lora_dropout=0.0,
                              target_modules=list(config.lora_target_modules), task_type="CAUSAL_LM")
                   if config.lora and config.adapter is None else None)
    logger = MetricsLogger(output, config.report_to, resume_iteration=_last_step(output) if resume else None,
                           config=config.to_dict())
    trainer = GRPOTrainer(model=model, reward_funcs=list(task.reward_fns), args=arguments,
                          train_dataset=_dataset(task.train_rows), processing_class=tokenizer,
                          peft_config=peft_config)
    contiguous_head_input(trainer.model)  # TRL generates with HF generate(): same 2x CPU fix as HFBackend
    evaluator = lambda: HFBackend(trainer.model, tokenizer)  # noqa: E731 - greedy eval on the live policy
    callback = EvotuneMetricsCallback(logger, task, evaluator, config, samples_per_step=config.batch_size * config.num_generations,
                                      training_seconds=_training_seconds(output) if resume else 0.0)
    trainer.add_callback(callback)
    started = time.perf_counter()
    try:
        trainer.train(resume_from_checkpoint=bool(resume and list((output / "trl").glob("checkpoint-*"))))
    finally:
        logger.close()
    final = output / "final"
    trainer.model.save_pretrained(str(final))  # a PEFT adapter (lora) or a full model
    tokenizer.save_pretrained(str(final))
    plot_curves(logger.path, output / "curves.png", title=f"GRPO: {config.model} on {config.task}")
    return {"output_dir": str(output), **callback.last_eval, "time_s": round(time.perf_counter() - started, 1)}


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _training_seconds(output: Path) -> float:
    """Training time already spent by a run being resumed: its steps' `time_s` up to TRL's last checkpoint."""
    from ..tracking import read_metrics

    last = _last_step(output) or 0
    return sum(record.get("time_s") or 0.0 for record in read_metrics(output / "metrics.jsonl")
               if isinstance(record.get("iteration"), int) and 0 < record["iteration"] <= last)


def _last_step(output: Path) -> int | None:
    checkpoints = sorted(output.glob("trl/checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    return int(checkpoints[-1].name.split("-")[-1]) if checkpoints else None


def sweep_learning_rates(config: GRPORunConfig, output_dir: str, learning_rates: list[float]) -> list[dict]:
    """One GRPO run per learning rate (the papers stress GRPO's sensitivity to it), DIR/lr_<value>."""
    results = []
    for rate in learning_rates:
        run = dataclasses.replace(config, learning_rate=float(rate))
        results.append({"learning_rate": rate, **run_grpo(run, str(Path(output_dir) / f"lr_{rate:g}"))})
    return results

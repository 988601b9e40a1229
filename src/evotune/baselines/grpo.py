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
import pickle
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

from ..config.files import read_config_values
from ..config.grpo import LOSS_TYPES, GRPORunConfig, LossType  # noqa: F401 - re-exported: their old home
from ..config.methods import rebase
from ..errors import ConfigError
from ..files.adapters import PICKLE_REFUSAL, read_adapter_config, refused_pickle
from ..import_utils import is_trl_available
from ..runs.directory import RESUMABLE_KEYS, changed_keys, read_run_config, refuse_other_commands_run
from ..runs.lifecycle import RunLifecycle
from ..tracking.tracker import MetricsLogger, good_prefix, out_of_time, plot_curves, read_metrics

# What `evotune grpo` writes into a run directory: only these are removed by --overwrite.
GRPO_ARTIFACTS = ("config.yaml", "metrics.jsonl", "trl", "final", "tensorboard", "curves.png", "loggers.json")


def load_grpo_config(path: str | None, overrides: list[str], resume_dir: str | Path | None = None,
                     base: dict | None = None) -> GRPORunConfig:
    """base (e.g. GRPO_QUICKSTART) <- CONFIG <- --set; with `resume_dir`, on top of that run's own config.yaml (what
    it was started with) instead of `base`."""
    if resume_dir is not None:
        base = read_run_config(Path(resume_dir))
        refuse_other_commands_run(base, Path(resume_dir), "grpo")
        foreign = sorted(set(base) - {field.name for field in dataclasses.fields(GRPORunConfig)})
        if foreign:
            raise ConfigError(f"--resume: {Path(resume_dir) / 'config.yaml'} has keys GRPO does not know "
                              f"({', '.join(foreign[:4])}): it is not an `evotune grpo` run (an `evotune train` run "
                              f"resumes with `evotune train --output-dir {resume_dir} --resume`).")
    if resume_dir is None and base:  # a quickstart the keys choose another method over
        given, _ = read_config_values(path, overrides)
        base = rebase(base, given)
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

        from ..files.adapters import check_adapter

        check_adapter(config.adapter, model, config.model)  # a clear error before PEFT's own
        model = PeftModel.from_pretrained(model, config.adapter, adapter_name="default", is_trainable=True)
    model.train()
    tokenizer.padding_side = "left"  # batched generation pads on the left
    return model, tokenizer


def _data_seeded_trainer_class() -> type:
    """GRPOTrainer whose prompt order follows `data_seed`. TRL (1.16) shuffles the prompts in its RepeatSampler
    with `args.seed` and ignores `args.data_seed`; without this, `data_seed` would seed only the train/held-out
    split and the order would follow `seed` (noise: LoRA init, sampling). Reseeding the sampler's generator right
    after it is made leaves it as TRL would build it with seed=data_seed (the same order when data_seed is unset)."""
    from trl import GRPOTrainer

    class DataSeededGRPOTrainer(GRPOTrainer):
        def _get_train_sampler(self, dataset: Any = None) -> Any:
            sampler = super()._get_train_sampler(dataset)
            if getattr(sampler, "shuffle", False):
                sampler.generator.manual_seed(self.args.data_seed)
            return sampler

    return DataSeededGRPOTrainer


def _grpo_arguments(config: GRPORunConfig, output: Path, reward_weights: list[float], max_steps: int) -> Any:
    """TRL's GRPOConfig for this run: one optimizer step per iteration, evotune's checkpoints and seeds (the
    prompt order's is data_seed: _data_seeded_trainer_class)."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(output / "trl"), learning_rate=config.learning_rate, max_steps=max_steps,
        per_device_train_batch_size=config.batch_size * config.num_generations // config.gradient_accumulation_steps,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        num_generations=config.num_generations, max_completion_length=config.max_new_tokens,
        temperature=config.temperature, beta=config.beta, loss_type=config.loss_type,
        reward_weights=reward_weights, seed=config.seed, data_seed=config.data_seed_or_seed, logging_steps=1,
        save_steps=config.checkpoint_every, report_to="none", use_cpu=not _cuda(), bf16=False,
        lr_scheduler_type="constant", disable_dropout=True,
        gradient_checkpointing=False)  # small models: recomputation costs more than the memory it saves


# --- the run directory: the same contract as `evotune train` (evotune.runs.directory) -------------------------


def check_grpo_resume(output_dir: str | Path, config: GRPORunConfig) -> None:
    """Refuse a resume (or a sweep re-run of a point) whose config changes a key that would change the run:
    only RESUMABLE_KEYS (how long to run, how often to evaluate, checkpoint and log) may differ."""
    path = Path(output_dir) / "config.yaml"
    run = GRPORunConfig.from_dict(read_run_config(Path(output_dir)), source=str(path))
    forbidden = [key for key in changed_keys(run, config) if key not in RESUMABLE_KEYS]
    if forbidden:
        details = "; ".join(f"`{key}` {getattr(run, key)!r} -> {getattr(config, key)!r}" for key in forbidden)
        resumable = ", ".join(key for key in RESUMABLE_KEYS if hasattr(config, key))
        raise ConfigError(f"{output_dir} holds a GRPO run whose earlier steps ran with its own config ({path}), but "
                          f"this one changes {details}. Nothing was changed. Resume with `evotune grpo --output-dir "
                          f"{output_dir} --resume` (only {resumable} may be changed with --set), or start a new "
                          "run in another --output-dir.")


def complete_checkpoints(output: Path) -> list[Path]:
    """TRL's checkpoints in DIR/trl, oldest first, that were written to the end. transformers writes
    trainer_state.json last (after the weights, optimizer, scheduler and RNG states), so a checkpoint is
    complete when that file parses and names the checkpoint's own step; a kill during a save leaves one that is not."""
    found = [path for path in (Path(output) / "trl").glob("checkpoint-*")
             if path.name.removeprefix("checkpoint-").isdigit() and _saved_step(path) == checkpoint_step(path)]
    return sorted(found, key=checkpoint_step)


def checkpoint_step(checkpoint: Path) -> int:
    return int(checkpoint.name.removeprefix("checkpoint-"))


def _saved_step(checkpoint: Path) -> int | None:
    try:
        return json.loads((checkpoint / "trainer_state.json").read_text())["global_step"]
    except (OSError, ValueError, KeyError, TypeError):  # missing, cut short by a kill, or not TRL's
        return None


def _check_adapter(config: GRPORunConfig, output: Path, resume: bool) -> None:
    """The adapter directory exists and holds a readable adapter_config.json, before anything is written."""
    if config.adapter is None:
        return
    if not Path(config.adapter).is_dir():
        where = ""
        if not os.path.isabs(config.adapter):
            where = f" (relative to the working directory {os.getcwd()})"
            if resume:  # a run recorded before paths were stored absolute
                where += ("; config.yaml names it relative to the directory the run was started from: resume "
                          "there")
        raise ConfigError(f"`adapter` {config.adapter} does not exist{where}; point it at a PEFT adapter "
                          "directory (an `evotune sft` run writes DIR/adapter), or remove `adapter`.")

    read_adapter_config(config.adapter)  # names a missing or unreadable adapter_config.json


def _resume_checkpoint(output: Path, config: GRPORunConfig) -> Path:
    check_grpo_resume(output, config)
    checkpoints = complete_checkpoints(output)
    if not checkpoints:
        raise ConfigError(f"--resume: no complete checkpoint in {output / 'trl'} (the run stopped before its first "
                          f"one; `checkpoint_every` is {config.checkpoint_every}); start it again with --overwrite, "
                          "or choose a new --output-dir.")
    done = checkpoint_step(checkpoints[-1])
    if config.iterations < done:  # refused: config.yaml must keep the record of the steps already taken
        raise ConfigError(f"--resume: `iterations` {config.iterations} is below the {done} steps {output} "
                          f"already trained ({checkpoints[-1]}); a resume cannot undo steps, so it was refused and "
                          f"config.yaml is unchanged. Resume with iterations >= {done}, or start a new run in another "
                          "--output-dir.")
    return checkpoints[-1]


def inspect_grpo_run(run: RunLifecycle, config: GRPORunConfig) -> Path | None:
    """`evotune grpo`'s checks of its directory (RunLifecycle's inspect; reads only): the TRL checkpoint to resume
    from, or None for a new run."""
    _check_adapter(config, run.output_dir, run.resume)
    checkpoint = _resume_checkpoint(run.output_dir, config) if run.resume else None
    if not run.resume:
        run.refuse_existing(resumable=True if complete_checkpoints(run.output_dir) else None)
    if config.dtype == "auto":  # config.yaml records this machine's choice, so a resume elsewhere keeps it
        from ..backends.models import resolve_dtype

        config.dtype = resolve_dtype("auto", "cpu")  # the device _policy loads the model on
    return checkpoint


def _drop_partial_saves(run: RunLifecycle) -> None:
    """A resume first removes TRL checkpoints a kill cut short: TRL would resume from the newest, whole or not."""
    complete = complete_checkpoints(run.output_dir)
    for partial_save in (run.output_dir / "trl").glob("checkpoint-*"):
        if partial_save not in complete:
            shutil.rmtree(partial_save)


def grpo_run(output_dir: str | Path, config: GRPORunConfig, resume: bool = False,
             overwrite: bool = False) -> RunLifecycle:
    """The lifecycle of an `evotune grpo` run directory (runs/lifecycle.py), as `evotune train`'s."""
    return RunLifecycle(output_dir, GRPO_ARTIFACTS, resume, overwrite,
                        inspect=lambda run: inspect_grpo_run(run, config), on_resume=_drop_partial_saves)


def _max_steps(config: GRPORunConfig, output: Path, done: int) -> tuple[int, float]:
    """(TRL's max_steps, training seconds already spent). A resumed run whose `max_training_seconds` is used
    up trains no further step (TRL would take one before the budget check) and says so."""
    spent = _training_seconds(output, done, config.training_clock) if done else 0.0
    if done and out_of_time(spent, config.max_training_seconds):
        warnings.warn(f"{output} already spent {spent:.1f} s of its max_training_seconds "
                      f"{config.max_training_seconds:g}: nothing is trained; final/ is written from step {done}. "
                      "Raise it to continue: --set max_training_seconds=SECONDS.", stacklevel=3)
        return done, spent
    return config.iterations, spent


def run_grpo(config: GRPORunConfig, output_dir: str, resume: bool = False, overwrite: bool = False) -> dict[str, Any]:
    """Train with TRL's GRPOTrainer; returns the last held-out metrics.

    resume: continue the run in `output_dir` from its last complete TRL checkpoint (`config` may differ from
    its config.yaml only in RESUMABLE_KEYS); overwrite: replace the run files there."""
    if not is_trl_available():
        raise ConfigError("`evotune grpo` runs TRL's GRPOTrainer: pip install 'evotune[grpo]'.")
    run = grpo_run(output_dir, config, resume, overwrite)
    run.inspect()  # every refusal before anything is written
    # a new run that fails before its first optimizer step (a model that does not load, bad data, a reward that
    # raises at once) leaves nothing, so the corrected command runs again without --overwrite
    built: list[Any] = []
    with run.opened(config, lambda: built[0].state.global_step if built else 0):
        return _run_grpo(config, run, built)


def _run_grpo(config: GRPORunConfig, run: RunLifecycle, built: list[Any]) -> dict[str, Any]:
    output, checkpoint = run.output_dir, run.checkpoint
    done = checkpoint_step(checkpoint) if checkpoint else 0
    max_steps, spent = _max_steps(config, output, done)
    trainer, callback, tokenizer = _build_trainer(config, output, checkpoint, max_steps, spent)
    built.append(trainer)
    started = time.perf_counter()
    try:
        if done >= max_steps:  # finished, or out of time: train() would still take one more step
            trainer._load_from_checkpoint(str(checkpoint))  # the checkpoint's weights, for final/
        else:
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    except pickle.UnpicklingError as error:  # TRL's optimizer, scheduler or RNG state, read weights-only
        if not refused_pickle(error):
            raise
        raise ConfigError(PICKLE_REFUSAL.format(path=checkpoint) + " Or start the run again with --overwrite.") \
            from error
    finally:
        callback.logger.close()
    with run.staged("final") as final:  # a PEFT adapter (lora) or a full model, moved into place whole
        trainer.model.save_pretrained(final)
        tokenizer.save_pretrained(final)
    plot_curves(callback.logger.path, output / "curves.png", title=f"GRPO: {config.model} on {config.task}")
    last_eval = callback.last_eval or _last_eval(output)  # a finished run resumed: no step, no new evaluation
    return {"output_dir": str(output), **last_eval, "time_s": round(time.perf_counter() - started, 1)}


def _build_trainer(config: GRPORunConfig, output: Path, checkpoint: Path | None, max_steps: int,
                   spent: float) -> tuple[Any, Any, Any]:
    """(TRL's GRPOTrainer, the metrics callback, the tokenizer) of this run."""
    from peft import LoraConfig
    from transformers.trainer_callback import ProgressCallback

    from ..backends import HFBackend
    from ..backends.hf import contiguous_head_input
    from ..evaluation.retention import build_retention
    from ..tasks import get_task
    from .grpo_logging import EvotuneMetricsCallback

    task = get_task(config.task, seed=config.data_seed_or_seed, num_eval=config.num_eval, dataset=config.dataset,
                    eval_dataset=config.eval_dataset, reward_fns=config.reward_fns or None,
                    reward_weights=config.reward_weights or None, **config.task_args)
    model, tokenizer = _policy(config)
    arguments = _grpo_arguments(config, output, list(task.reward_weights), max_steps)
    peft_config = (LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, lora_dropout=0.0,
                              target_modules=list(config.lora_target_modules), task_type="CAUSAL_LM")
                   if config.lora and config.adapter is None else None)
    # on resume, metrics.jsonl keeps the records up to the checkpoint: the steps after it are trained again
    logger = MetricsLogger(output, config.report_to,
                           resume_iteration=checkpoint_step(checkpoint) if checkpoint else None,
                           config=config.to_dict())
    trainer = _data_seeded_trainer_class()(model=model, reward_funcs=list(task.reward_fns), args=arguments,
                                           train_dataset=_dataset(task.train_rows), processing_class=tokenizer,
                                           peft_config=peft_config)
    contiguous_head_input(trainer.model)  # TRL generates with HF generate(): same 2x CPU fix as HFBackend
    evaluator = lambda: HFBackend(trainer.model, tokenizer)  # noqa: E731 - greedy eval on the live policy
    retention = build_retention(config, evaluator())  # LoRA: the adapter switched off is the KL's base
    # transformers' own bar: with a time budget its total becomes where the budget stops the run
    progress = next((hook for hook in trainer.callback_handler.callbacks if isinstance(hook, ProgressCallback)), None)
    callback = EvotuneMetricsCallback(logger, task, evaluator, config,
                                      samples_per_step=config.batch_size * config.num_generations,
                                      training_seconds=spent, retention=retention,
                                      progress_bar=lambda: getattr(progress, "training_bar", None))
    trainer.add_callback(callback)
    return trainer, callback, tokenizer


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _training_seconds(output: Path, last: int, clock: str = "wall") -> float:
    """Training time already spent by a run being resumed, on the budget's clock: its steps' `time_s` (wall) or
    `cpu_s` up to TRL's last checkpoint, read from the records before any damage (the metrics logger then keeps
    those, with a note, as train's resume does)."""
    path = output / "metrics.jsonl"
    records = good_prefix(path)[0] if path.is_file() else []
    key = "cpu_s" if clock == "cpu" else "time_s"
    return sum(record[key] for record in records if isinstance(record.get(key), (int, float))
               and isinstance(record.get("iteration"), int) and 0 < record["iteration"] <= last)


def _last_eval(output: Path) -> dict[str, Any]:
    evaluated = [record for record in read_metrics(output / "metrics.jsonl")
                 if any(k.startswith("eval/") for k in record)]
    return {key: value for key, value in evaluated[-1].items() if key.startswith("eval/")} if evaluated else {}


def sweep_learning_rates(config: GRPORunConfig, output_dir: str, learning_rates: list[float]) -> list[dict]:
    """One GRPO run per learning rate (the papers stress GRPO's sensitivity to it), DIR/lr_<value>."""
    results = []
    for rate in learning_rates:
        run = dataclasses.replace(config, learning_rate=float(rate))
        results.append({"learning_rate": rate, **run_grpo(run, str(Path(output_dir) / f"lr_{rate:g}"))})
    return results

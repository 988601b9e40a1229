"""A trainer with TRL's shape: swap `GRPOTrainer` for `ESTrainer` and keep your model, reward
functions and datasets.

    trainer = ESTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=[accuracy_reward],
                        args=ESConfig(output_dir="out", population_size=30, sigma=1e-3),
                        train_dataset=dataset)
    trainer.train()

Arguments mean what they mean in TRL's GRPOTrainer: `model` is a hub id, a local directory or a
loaded `PreTrainedModel` (with `processing_class` for its tokenizer); `reward_funcs` are callables
with TRL's signature, import paths, reward-model ids, or a list mixing them (weights in
`args.reward_weights`); datasets are `datasets.Dataset` objects (or lists of dicts, a dict of
columns, a list of prompt strings) in TRL's standard or conversational prompt format, extra columns
reaching the reward functions. The run goes through the same `Trainer` as `evotune train`, so the
run directory is the CLI's (`args.overwrite` replaces a run there, as --overwrite does): the datasets
are written to `output_dir/data/` and the config records them and the reward functions' import paths.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .backends import HFBackend
from .callbacks import ESCallback
from .config.checks import resolve_device
from .config.fields import option
from .config.train import ADAPTER_SPACES, TrainConfig
from .errors import ConfigError
from .evaluation.generation import eval_budget, eval_record, evaluate_model
from .files.adapters import check_target_modules
from .files.checkpoint import find_checkpoint
from .runs.directory import existing_artifacts
from .tasks import Task
from .tasks.trl_inputs import dataset_rows, import_path, jsonl_text, resolve_reward_funcs

if TYPE_CHECKING:  # only named in ESTrainer's signature (the API reference shows them)
    import datasets
    import peft
    import transformers

# ESConfig's keys that describe the run directory, not the run: config.yaml does not record them.
TRAINER_KEYS = ("output_dir", "overwrite")
HOOKS = ("on_train_begin", "on_evaluate", "on_iteration_end", "on_train_end")


@dataclass
class ESConfig(TrainConfig):
    """TrainConfig plus TRL's `output_dir` and `overwrite`: every `evotune keys` key is an argument."""

    output_dir: str = option("trainer_output", "Run directory (config.yaml, metrics.jsonl, checkpoint/, final/).")
    overwrite: bool = option(False, "Replace a run already in output_dir (what a run writes there; other files stay), "
                                    "as `evotune train --overwrite`; False refuses to start over it.")

    def __post_init__(self) -> None:
        # As in TRL, the reward functions go to the trainer and their weights here: every other check now,
        # the pairing of weights with functions when ESTrainer has both.
        values = self.to_dict()
        for key in TRAINER_KEYS:
            values.pop(key)
        if not isinstance(self.overwrite, bool):
            raise ConfigError(f"ESConfig(overwrite={self.overwrite!r}): overwrite is True or False.")
        if not values["reward_fns"]:
            values["reward_weights"] = []
        TrainConfig.from_dict(values)


def as_es_config(args: Any) -> ESConfig:
    """`args` as an ESConfig: a TrainConfig keeps its values (in the default output_dir); anything else is refused."""
    if args is None:
        return ESConfig()
    if isinstance(args, ESConfig):
        return args
    if isinstance(args, TrainConfig):  # evotune's own config, as `evotune train` takes it: only the directory is new
        return ESConfig(**args.to_dict())
    raise ConfigError(f"args is a {type(args).__name__}; ESTrainer takes ESConfig(output_dir=..., ...) (every "
                      "TrainConfig key plus output_dir and overwrite). TRL's names map as: max_steps -> iterations, "
                      "max_completion_length -> max_new_tokens, num_generations -> population_size.")


def resolve_callbacks(callbacks: Any) -> list:
    """ESCallback objects (a subclass is instantiated, as TRL does); anything without evotune's hooks is refused."""
    resolved = []
    for index, callback in enumerate(callbacks if isinstance(callbacks, (list, tuple)) else [callbacks]):
        if isinstance(callback, type) and issubclass(callback, ESCallback):
            try:
                callback = callback()
            except TypeError as error:
                raise ConfigError(f"callbacks[{index}]: {callback.__name__}() needs arguments ({error}); pass an "
                                  "instance.") from error
        if not all(callable(getattr(callback, hook, None)) for hook in HOOKS):
            raise ConfigError(f"callbacks[{index}] is {callback!r}, not an evotune.callbacks.ESCallback: subclass it "
                              f"and override its hooks ({', '.join(HOOKS)}). transformers' TrainerCallback hooks "
                              "take other arguments.")
        resolved.append(callback)
    return resolved


def target_module_list(modules: Any, default: list[str]) -> list[str]:
    """LoraConfig.target_modules as config.yaml's list: None -> evotune's default (`lora_target_modules`,
    q/k/v/o unless set), "all-linear" -> ["all-linear"] (PEFT's meaning); other strings (PEFT regexes) refused."""
    if modules is None:
        return list(default)
    if isinstance(modules, str):
        if modules == "all-linear":
            return ["all-linear"]
        raise ConfigError(f"peft_config.target_modules={modules!r}: a string is a regex to PEFT, which evotune does "
                          "not take; pass a list of module names (e.g. ['q_proj', 'v_proj']) or 'all-linear'.")
    return sorted(modules)


class ESTrainer:
    """TRL-shaped front end of `evotune.trainer.Trainer` (ES at Scale, or ESSA with `peft_config`).

    Every argument is checked here, before anything is written; a start that fails later (a model that does
    not load, an adapter PEFT refuses) removes what it wrote, so the same script can simply run again."""

    def __init__(self, model: str | os.PathLike[str] | transformers.PreTrainedModel,
                 reward_funcs: (Callable[..., list[float | None]] | str
                                | Sequence[Callable[..., list[float | None]] | str] | None) = None,
                 args: ESConfig | None = None,
                 train_dataset: (datasets.Dataset | Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]]
                                 | Sequence[str] | None) = None,
                 eval_dataset: (datasets.Dataset | Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]]
                                | Sequence[str] | None) = None,
                 processing_class: transformers.PreTrainedTokenizerBase | None = None,
                 callbacks: ESCallback | type[ESCallback] | Sequence[ESCallback | type[ESCallback]] | None = None,
                 peft_config: peft.LoraConfig | None = None):
        args = as_es_config(args)
        values = args.to_dict()
        self.output_dir = Path(values.pop("output_dir"))
        self.overwrite = values.pop("overwrite")
        self.callbacks = resolve_callbacks(callbacks or [])
        self.backend = self._backend(model, processing_class)
        values["model"] = model if isinstance(model, str) else getattr(model, "name_or_path", "") or values["model"]
        if self.backend is not None:
            values["dtype"] = str(next(self.backend.model.parameters()).dtype).removeprefix("torch.")
        if peft_config is not None:
            values.update(self._adapter_keys(peft_config, values))
        functions = resolve_reward_funcs(reward_funcs) if reward_funcs is not None else None
        self.train_rows = dataset_rows(train_dataset, "train_dataset") if train_dataset is not None else None
        self.eval_rows = dataset_rows(eval_dataset, "eval_dataset") if eval_dataset is not None else None
        if self.train_rows is not None:
            if not functions:
                raise ConfigError("ESTrainer with a train_dataset needs reward_funcs (TRL's signature: "
                                  "fn(prompts, completions, **columns) -> list[float]).")
            values.update(task="custom", task_args={}, dataset=str(self.output_dir / "data" / "train.jsonl"),
                          eval_dataset=str(self.output_dir / "data" / "eval.jsonl") if self.eval_rows else None)
        elif self.eval_rows is not None:
            raise ConfigError("eval_dataset without train_dataset: a built-in task (ESConfig(task=...)) brings its own "
                              "held-out rows; pass train_dataset too, or leave eval_dataset out.")
        if functions:
            values["reward_fns"] = [import_path(function) for function in functions]
        self.config = TrainConfig.from_dict(values)
        self.task = self._task(functions)
        self.trainer: Any = None
        self._starting_retention: Any = ...  # evaluate()'s before train(); ... until first built (None: no retention)

    @staticmethod
    def _backend(model: Any, processing_class: Any) -> Any:
        """An HFBackend around an already loaded model; None when `model` names one to load."""
        if isinstance(model, (str, os.PathLike)):
            return None
        if not hasattr(model, "name_or_path") or not callable(getattr(model, "generate", None)):
            raise ConfigError(f"model is a {type(model).__name__}; pass a hub id, a local directory, or a loaded "
                              "transformers causal LM (with processing_class=its tokenizer).")

        tokenizer = processing_class
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(model.name_or_path)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"  # batched generation continues every prompt from its last token
        return HFBackend(model.eval(), tokenizer)

    def _adapter_keys(self, peft_config: Any, values: dict[str, Any]) -> dict[str, Any]:
        """LoraConfig -> the adapter keys (ESSA evolves the adapter's singular values)."""
        if values["space"] not in ADAPTER_SPACES:
            raise ConfigError("peft_config gives ES an adapter to evolve: set ESConfig(space='svd_lora') (ESSA: the "
                              "adapter's singular values) or space='lora' (every adapter entry).")
        if not all(hasattr(peft_config, key) for key in ("r", "lora_alpha", "target_modules")):
            raise ConfigError(f"peft_config is a {type(peft_config).__name__}; pass peft.LoraConfig(r=..., "
                              "target_modules=[...]) (ES evolves LoRA adapters).")
        if values["adapter"] is not None:
            raise ConfigError(f"peft_config describes a fresh adapter and ESConfig(adapter={values['adapter']!r}) "
                              "loads a saved one; pass only one of them.")
        targets = target_module_list(peft_config.target_modules, values["lora_target_modules"])
        if self.backend is not None:  # a loaded model: name missing modules now, before anything is written
            check_target_modules(self.backend.model, [] if targets == ["all-linear"] else targets,
                                 "peft_config.target_modules")
        return {"lora_rank": int(peft_config.r), "lora_alpha": float(peft_config.lora_alpha),
                "lora_target_modules": targets}

    def _task(self, functions: list[Callable] | None) -> Task:
        """build_task's: a built-in task (its rewards optionally replaced by the callables), or `custom` over the
        datasets' rows, split as the CLI splits the files written to data/, so it resumes this run exactly."""
        from .builders import build_task

        rows = None if self.train_rows is None else (self.train_rows, self.eval_rows)
        return build_task(self.config, reward_fns=functions, rows=rows)

    def _data_files(self) -> list[tuple[list[dict] | None, Path]]:
        return [(rows, self.output_dir / "data" / f"{name}.jsonl")
                for rows, name in ((self.train_rows, "train"), (self.eval_rows, "eval"))]

    def _check_data(self) -> None:
        """A resumed run must see the data it started with."""
        for rows, path in self._data_files():
            if rows is not None and not (path.exists() and path.read_text() == jsonl_text(rows)):
                raise ConfigError(f"resume_from_checkpoint: the {path.stem}_dataset differs from the one this run "
                                  f"started with ({path}); pass the same dataset, or start a new run in another "
                                  "output_dir.")

    def _check_new_run(self) -> None:
        """A new run may replace an earlier one only when asked (`overwrite`), as the CLI's --overwrite."""
        found = existing_artifacts(self.output_dir)
        if found and not self.overwrite:
            resumable = " call train(resume_from_checkpoint=True) to continue it," if find_checkpoint(
                self.output_dir / "checkpoint") else ""
            raise ConfigError(f"{self.output_dir} already holds a run ({', '.join(found)}):{resumable} set "
                              "ESConfig(overwrite=True) to replace it, or choose another output_dir.")

    def _write_data(self) -> None:
        for rows, path in self._data_files():
            if rows is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(jsonl_text(rows))

    def _remove_attempt(self) -> None:
        """What a failed start wrote (config.yaml, data/, ...), so that the next attempt starts cleanly;
        only names a run writes, never the user's other files."""
        for name in existing_artifacts(self.output_dir):
            path = self.output_dir / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        for _, path in self._data_files():
            path.unlink(missing_ok=True)
        if (self.output_dir / "data").is_dir() and not any((self.output_dir / "data").iterdir()):
            (self.output_dir / "data").rmdir()

    def _resume(self, resume_from_checkpoint: Any) -> bool:
        """TRL's argument: None/False start a run, True (or the run's checkpoint path) continues it."""
        if resume_from_checkpoint is None or resume_from_checkpoint is False:
            return False
        if not isinstance(resume_from_checkpoint, (bool, str, os.PathLike)):
            kind = type(resume_from_checkpoint).__name__
            raise ConfigError(f"resume_from_checkpoint={resume_from_checkpoint!r} ({kind}):"
                              " pass True to continue the run in output_dir, or that run's checkpoint path.")
        if resume_from_checkpoint is not True and Path(resume_from_checkpoint).resolve() not in (
                self.output_dir.resolve(), (self.output_dir / "checkpoint").resolve()):
            raise ConfigError(f"resume_from_checkpoint={resume_from_checkpoint!r}: an evotune run keeps its one "
                              f"checkpoint in output_dir/checkpoint ({self.output_dir / 'checkpoint'}); pass True, or "
                              "set output_dir to the run you want to continue.")
        if find_checkpoint(self.output_dir / "checkpoint") is None:
            raise ConfigError(f"resume_from_checkpoint: no checkpoint in {self.output_dir / 'checkpoint'} (a new "
                              "output_dir, or a run that stopped before its first checkpoint); call train() without "
                              "resume_from_checkpoint to start the run (with ESConfig(overwrite=True) if the "
                              "directory holds one).")
        return True

    def _build(self, resume: bool) -> Any:
        from .trainer import Trainer

        self._check_data() if resume else self._check_new_run()
        try:
            trainer = Trainer(self.config, self.output_dir, resume=resume, backend=self.backend, task=self.task,
                              callbacks=self.callbacks, overwrite=self.overwrite and not resume)
            if not resume:
                self._write_data()
        except BaseException:
            if not resume:  # a failed start leaves nothing that blocks the next one
                self._remove_attempt()
            raise
        return trainer

    def train(self, resume_from_checkpoint: bool | str | None = None) -> dict[str, float]:
        """Run ES; returns the last held-out metrics. resume_from_checkpoint: True (or the run's checkpoint
        path) continues the run in output_dir, as `evotune train --resume`."""
        self._starting_retention = ...  # the run builds its own; the starting model's copy is freed
        self.trainer = self._build(self._resume(resume_from_checkpoint))
        self.backend = self.trainer.backend
        try:
            return self.trainer.train()
        except BaseException:
            if not (self.output_dir / "config.yaml").exists():  # a run that did no iteration, removed by the trainer
                self._remove_attempt()  # its data/ too
            raise

    def evaluate(self) -> dict[str, float]:
        """Held-out metrics (`eval/<metric>`) of the current model, and `retain/<task>/<metric>` for
        `retention_tasks`, as a training run logs them: before train(), the starting model's."""
        if self.trainer is not None:
            return self.trainer.evaluate()
        from .builders import load_backend
        from .evaluation.retention import build_retention

        if self.backend is None:
            self.backend = load_backend(self.config, resolve_device(self.config.device))
        budget = eval_budget(self.task, self.config.max_new_tokens, self.config.eval_max_new_tokens)
        metrics, _ = evaluate_model(self.backend, self.task, self.task.eval_rows, budget)
        if self._starting_retention is ...:  # built once: for a full-parameter space it holds a copy of the base
            self._starting_retention = build_retention(self.config, self.backend)
        retention = self._starting_retention
        return {**eval_record(metrics), **(retention.evaluate(self.backend) if retention else {})}

    def save_model(self, output_dir: str | None = None) -> None:
        """Write the trained model (a PEFT adapter for adapter spaces) to output_dir (default: final/)."""
        if self.trainer is None:
            raise ConfigError("save_model() saves what train() trained: call train() first.")
        directory = str(output_dir or self.output_dir / "final")
        self.trainer.space.save_pretrained(directory, self.trainer.backend)

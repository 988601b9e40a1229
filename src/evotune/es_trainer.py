"""A trainer with TRL's shape: swap `GRPOTrainer` for `ESTrainer` and keep your model, reward
functions and datasets.

    trainer = ESTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=[accuracy_reward],
                        args=ESConfig(output_dir="out", population_size=30, sigma=1e-3),
                        train_dataset=dataset)
    trainer.train()

Arguments mean what they mean in TRL's GRPOTrainer: `model` is a hub id, a local directory or a
loaded `PreTrainedModel` (with `processing_class` for its tokenizer); `reward_funcs` are callables
with TRL's signature, import paths, reward-model ids, or a list mixing them (weights in
`args.reward_weights`); datasets are `datasets.Dataset` objects (or lists of dicts) in TRL's
standard or conversational prompt format, extra columns reaching the reward functions. The run
goes through the same `Trainer` as `evotune train`, so the run directory is the CLI's: the datasets
are written to `output_dir/data/` and the config records them and the reward functions' import paths.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import TrainConfig
from .config_fields import _opt
from .errors import ConfigError
from .tasks import Task, get_task
from .tasks.base import function_name
from .tasks.custom import custom_task, import_reward_fn
from .tasks.data import validate_rows


@dataclass
class ESConfig(TrainConfig):
    """TrainConfig plus TRL's `output_dir`: every `evotune keys` key is an argument."""

    output_dir: str = _opt("trainer_output", "Run directory (config.yaml, metrics.jsonl, checkpoint/, final/).")

    def __post_init__(self) -> None:
        # As in TRL, the reward functions go to the trainer and their weights here: every other check now,
        # the pairing of weights with functions when ESTrainer has both.
        values = self.to_dict()
        values.pop("output_dir")
        if not values["reward_fns"]:
            values["reward_weights"] = []
        TrainConfig.from_dict(values)


def _is_reward_model(spec: str) -> bool:
    """A string reward is a reward model (TRL's meaning) when it is a directory or a hub id `org/name`;
    `module:function` and `module.function` are import paths."""
    return ":" not in spec and (Path(spec).is_dir() or "/" in spec)


def resolve_reward_funcs(reward_funcs: Any) -> list[Callable]:
    """Callables, import paths and reward-model ids (one or a list) as reward functions."""
    from .tasks.reward_model import RewardModelScorer

    specs = reward_funcs if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
    functions = []
    for spec in specs:
        if callable(spec):
            functions.append(spec)
        elif isinstance(spec, str) and _is_reward_model(spec):
            functions.append(RewardModelScorer(spec))
        elif isinstance(spec, str):
            functions.append(import_reward_fn(spec))
        else:
            raise ConfigError(f"reward_funcs: {spec!r} is neither a function, an import path (`module:function`) "
                              "nor a reward model (a directory or hub id).")
    return functions


def import_path(function: Callable) -> str:
    """How config.yaml names a reward function: `module:qualname` (a reward model: its id)."""
    model = getattr(function, "model_name", None)
    if model is not None:
        return str(model)
    module, qualname = getattr(function, "__module__", None), getattr(function, "__qualname__", None)
    return f"{module}:{qualname}" if module and qualname else function_name(function)


def dataset_rows(dataset: Any, name: str) -> list[dict]:
    """Rows of a `datasets.Dataset` (or any iterable of dicts) with a `prompt` column."""
    if isinstance(dataset, (str, Path)):
        raise ConfigError(f"{name} is a path; ESTrainer takes dataset objects (datasets.Dataset or a list of dicts). "
                          "For files, set `dataset` / `eval_dataset` in ESConfig and leave the argument out.")
    if not isinstance(dataset, Iterable):
        raise ConfigError(f"{name} is a {type(dataset).__name__}; pass a datasets.Dataset or a list of dicts.")
    rows = [dict(row) for row in dataset]
    validate_rows(rows, name)
    return rows


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


class ESTrainer:
    """TRL-shaped front end of `evotune.trainer.Trainer` (ES at Scale, or ESSA with `peft_config`)."""

    def __init__(self, model: Any, reward_funcs: Any = None, args: ESConfig | None = None,
                 train_dataset: Any = None, eval_dataset: Any = None, processing_class: Any = None,
                 callbacks: list | None = None, peft_config: Any = None):
        args = args or ESConfig()
        values = args.to_dict()
        self.output_dir = Path(values.pop("output_dir"))
        self.backend = self._backend(model, processing_class)
        values["model"] = model if isinstance(model, str) else getattr(model, "name_or_path", "") or values["model"]
        if self.backend is not None:
            values["dtype"] = str(next(self.backend.model.parameters()).dtype).removeprefix("torch.")
        if peft_config is not None:
            values.update(self._adapter_keys(peft_config, values["space"]))
        functions = resolve_reward_funcs(reward_funcs) if reward_funcs is not None else None
        self.train_rows = dataset_rows(train_dataset, "train_dataset") if train_dataset is not None else None
        self.eval_rows = dataset_rows(eval_dataset, "eval_dataset") if eval_dataset is not None else None
        if self.train_rows is not None:
            if not functions:
                raise ConfigError("ESTrainer with a train_dataset needs reward_funcs (TRL's signature: "
                                  "fn(prompts, completions, **columns) -> list[float]).")
            values.update(task="custom", task_args={}, dataset=str(self.output_dir / "data" / "train.jsonl"),
                          eval_dataset=str(self.output_dir / "data" / "eval.jsonl") if self.eval_rows else None)
        if functions:
            values["reward_fns"] = [import_path(function) for function in functions]
        self.config = TrainConfig.from_dict(values)
        self.task = self._task(functions)
        self.callbacks = list(callbacks or [])
        self.trainer: Any = None

    @staticmethod
    def _backend(model: Any, processing_class: Any) -> Any:
        """An HFBackend around an already loaded model; None when `model` names one to load."""
        if isinstance(model, str):
            return None
        from .backends import HFBackend

        tokenizer = processing_class
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(model.name_or_path)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"  # batched generation continues every prompt from its last token
        return HFBackend(model.eval(), tokenizer)

    @staticmethod
    def _adapter_keys(peft_config: Any, space: str) -> dict[str, Any]:
        """LoraConfig -> the adapter keys (ESSA evolves the adapter's singular values)."""
        if space not in ("lora", "svd_lora"):
            raise ConfigError("peft_config gives ES an adapter to evolve: set ESConfig(space='svd_lora') (ESSA: the "
                              "adapter's singular values) or space='lora' (every adapter entry).")
        modules = peft_config.target_modules
        return {"lora_rank": int(peft_config.r), "lora_alpha": float(peft_config.lora_alpha),
                "lora_target_modules": sorted(modules) if isinstance(modules, (set, list, tuple)) else [modules]}

    def _task(self, functions: list[Callable] | None) -> Task:
        config = self.config
        if self.train_rows is None:  # a built-in task, its rewards optionally replaced
            task = get_task(config.task, seed=config.seed, num_eval=config.num_eval, dataset=config.dataset,
                            eval_dataset=config.eval_dataset, **config.task_args)
            if functions:
                task.reward_fns = functions
                task.reward_weights = list(config.reward_weights) or [1.0] * len(functions)
            return task
        # the same split as `task: custom` over the files written to data/, so the CLI resumes this run exactly
        return custom_task(self.train_rows, self.eval_rows, functions, list(config.reward_weights) or None,
                           seed=config.seed, num_eval=config.num_eval, source="train_dataset")

    def _check_data(self) -> None:
        """A resumed run must see the data it started with."""
        for rows, name in ((self.train_rows, "train"), (self.eval_rows, "eval")):
            path = self.output_dir / "data" / f"{name}.jsonl"
            if rows is not None and not (path.exists() and path.read_text() == _jsonl(rows)):
                raise ConfigError(f"resume_from_checkpoint: the {name}_dataset differs from the one this run started "
                                  f"with ({self.output_dir / 'data' / f'{name}.jsonl'}); pass the same dataset, or "
                                  "start a new run in another output_dir.")

    def _write_data(self) -> None:
        for rows, name in ((self.train_rows, "train"), (self.eval_rows, "eval")):
            if rows is not None:
                (self.output_dir / "data").mkdir(parents=True, exist_ok=True)
                (self.output_dir / "data" / f"{name}.jsonl").write_text(_jsonl(rows))

    def _resume(self, resume_from_checkpoint: bool | str | None) -> bool:
        if resume_from_checkpoint in (None, False):
            return False
        if resume_from_checkpoint is True:
            return True
        if Path(resume_from_checkpoint).resolve() not in (self.output_dir.resolve(),
                                                         (self.output_dir / "checkpoint").resolve()):
            raise ConfigError(f"resume_from_checkpoint={resume_from_checkpoint!r}: an evotune run keeps its one "
                              f"checkpoint in output_dir/checkpoint ({self.output_dir / 'checkpoint'}); pass True, or "
                              "set output_dir to the run you want to continue.")
        return True

    def _build(self, resume: bool) -> Any:
        from .trainer import Trainer

        if resume:
            self._check_data()
        trainer = Trainer(self.config, self.output_dir, resume=resume, backend=self.backend, task=self.task,
                          callbacks=self.callbacks)
        if not resume:
            self._write_data()
        return trainer

    def train(self, resume_from_checkpoint: bool | str | None = None) -> dict[str, float]:
        """Run ES; returns the last held-out metrics. resume_from_checkpoint: True (or the run's checkpoint
        path) continues the run in output_dir, as `evotune train --resume`."""
        self.trainer = self._build(self._resume(resume_from_checkpoint))
        self.backend = self.trainer.backend
        return self.trainer.train()

    def evaluate(self) -> dict[str, float]:
        """Held-out metrics (`eval/<metric>`) of the current model: before train(), the starting model."""
        if self.trainer is not None:
            return self.trainer.evaluate()
        from .backends.base import resolve_device
        from .builders import load_backend
        from .generation import eval_record, evaluate_model

        if self.backend is None:
            self.backend = load_backend(self.config, resolve_device(self.config.device))
        metrics, _ = evaluate_model(self.backend, self.task, self.task.eval_rows, self.config.max_new_tokens)
        return eval_record(metrics)

    def save_model(self, output_dir: str | None = None) -> None:
        """Write the trained model (a PEFT adapter for adapter spaces) to output_dir (default: final/)."""
        if self.trainer is None:
            raise ConfigError("save_model() saves what train() trained: call train() first.")
        directory = str(output_dir or self.output_dir / "final")
        self.trainer.space.save_pretrained(directory, self.trainer.backend)

"""The configuration of `evotune sft` (LoRA supervised fine-tuning, stage 1 of ESSA): its keys, their help
and its cross-field checks. The run itself is evotune/sft.py, which re-exports `SFTConfig`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, get_args

from ..errors import ConfigError
from .checks import check_device, check_int4_keys
from .fields import option, same_as
from .train import ComputeDtype, DtypeName, Int4Type, LoraInit, Quantization, RunConfig, TaskName, TrainConfig


@dataclass
class SFTConfig(RunConfig):
    KIND = "SFT"
    COMMAND: ClassVar[str] = "sft"
    MIN_NUM_EVAL: ClassVar[int] = 0  # SFT's 0: no evaluation before and after training

    max_new_tokens: int = option(32, "SFT generates nothing while it trains; its greedy evaluation before and after "
                                     "generates this many new tokens per held-out prompt, or the task's own budget "
                                     "where that is larger (eval_max_new_tokens, when set, replaces both).")

    task: TaskName | None = option(None, "Built-in task (e.g. arithmetic): its train rows are the SFT data "
                                         "(completion = their `solution` or `answer` column) and its held-out rows "
                                         "are evaluated before and after training (not custom: your own data goes in "
                                         "`dataset`).")
    dataset: str | None = option(None, "JSONL/CSV/parquet file with `prompt` and `completion` columns (TRL's "
                                       "prompt-completion format); replaces the task's train rows.")
    dtype: DtypeName = option("float32", "Base weights dtype (the adapter trains in fp32); float32 by default: on CPU "
                                         "a backward pass through bfloat16 weights measured ~2x slower per step (1.3x "
                                         "with avx512_bf16: bench/results/speed/dtype_speed_*). auto picks as for "
                                         "train.")
    num_train: int | None = option(None, "Use at most this many training examples (None: all).")
    lora_init: LoraInit = same_as(TrainConfig, "lora_init")
    # the optimizer
    learning_rate: float = option(2e-4, "AdamW peak learning rate (linear warmup, then linear decay to 0).")
    epochs: int = option(1, "Passes over the training examples (ignored when `max_steps` is set).")
    batch_size: int = option(8, "Examples per optimizer step.")
    max_steps: int | None = option(None, "Optimizer steps to run (None: `epochs` passes over the data).")
    warmup_steps: int = option(0, "Steps of linear learning-rate warmup.")
    weight_decay: float = same_as(TrainConfig, "weight_decay")
    max_grad_norm: float = option(1.0, "Clip the gradient norm to this (0: no clipping).")
    checkpoint_every: int = option(20, "Write a resumable checkpoint every this many optimizer steps (0: none); "
                                       "`evotune sft --resume` continues from the last one.")
    device: str = same_as(TrainConfig, "device")
    # QLoRA-style: the LoRA adapter trains in fp32 over a frozen INT8/INT4 base (ESSA's stage 1 on that base)
    quantization: Quantization = same_as(TrainConfig, "quantization")
    int4_type: Int4Type = same_as(TrainConfig, "int4_type")
    int4_double_quantization: bool = same_as(TrainConfig, "int4_double_quantization")
    int4_compute_dtype: ComputeDtype | None = same_as(TrainConfig, "int4_compute_dtype")

    def validate(self) -> None:
        super().validate()
        check_device(self.device)
        check_int4_keys(self)
        if self.task is None and self.dataset is None:
            raise ConfigError("SFT needs data: set `task` (a built-in task, e.g. `--set task=arithmetic`) or "
                              "`dataset` (a file with `prompt` and `completion` columns).")
        if self.task == "custom":
            built_in = [name for name in get_args(TaskName) if name != "custom"]
            raise ConfigError(f"`task` is 'custom'; set it to one of: {', '.join(built_in)} (your own data goes in "
                              "`dataset`, with `prompt` and `completion` columns).")
        if not self.learning_rate > 0:
            raise ConfigError(f"`learning_rate` is {self.learning_rate}; it must be > 0 (LoRA SFT: 1e-4 to 1e-3).")
        for key in ("epochs", "batch_size", "max_steps", "num_train"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ConfigError(f"`{key}` is {value!r}; it must be a whole number of at least 1"
                                  + (" (or null for no limit)." if key in ("max_steps", "num_train") else "."))
        for key in ("warmup_steps", "weight_decay", "max_grad_norm", "checkpoint_every"):
            if getattr(self, key) < 0:
                raise ConfigError(f"`{key}` is {getattr(self, key)}; it must be >= 0.")

"""`evotune grpo`'s config: `evotune train`'s vocabulary (the RunConfig keys and the reward keys) plus GRPO's own.
The run itself is baselines/grpo.py (TRL's GRPOTrainer)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, get_args

from ..errors import ConfigError
from .checks import check_rewards
from .fields import option, same_as
from .files import absolutize_paths
from .parts import FRESH_ADAPTER, default_of
from .train import DtypeName, RunConfig, TrainConfig, TrainingClock

LossType = Literal["grpo", "dr_grpo", "dapo", "bnpo"]  # TRL's loss types
LOSS_TYPES = get_args(LossType)


@dataclass
class GRPORunConfig(RunConfig):
    """`evotune train`'s vocabulary (the RunConfig keys and the reward keys) plus GRPO's own."""

    KIND = "GRPO"
    COMMAND: ClassVar[str] = "grpo"

    eval_dataset: str | None = same_as(TrainConfig, "eval_dataset")
    reward_fns: list[str] = same_as(TrainConfig, "reward_fns")
    reward_weights: list[float] = same_as(TrainConfig, "reward_weights")
    dtype: DtypeName = option("float32", "Base weights dtype (the LoRA adapter stays fp32). bfloat16 measured ~1.5x "
                                         "faster GRPO steps than float32 on one 2-core CPU (examples/grpo_*.yaml) but "
                                         "~1.3x slower on one with avx512_bf16 and no AMX (bench/results/"
                                         "dtype_speed_*); auto picks as for train.")
    # GRPO itself (defaults from the papers: group 8, learning rate 1e-5 for LoRA / 1e-6 full)
    iterations: int = option(20, "GRPO optimizer steps (TRL's max_steps), each batch_size prompts x num_generations "
                                 "sampled completions and one gradient step.")
    max_training_seconds: float = same_as(TrainConfig, "max_training_seconds")
    training_clock: TrainingClock = same_as(TrainConfig, "training_clock")
    batch_size: int = option(4, "Prompts per step; each gets `num_generations` sampled completions.")
    num_generations: int = option(8, "Group size G (completions per prompt); the papers use 8 or 30.")
    gradient_accumulation_steps: int = option(1, "Micro-batches per step: the batch_size x num_generations completions "
                                                 "are generated at once, then the loss runs over this many slices "
                                                 "(the same update, less peak memory).")
    learning_rate: float = option(1e-5, "AdamW learning rate (GRPO is sensitive to it: see --sweep-learning-rates).")
    beta: float = option(0.0, "KL penalty to the reference model (0: none, TRL's default; 0.04: classic GRPO).")
    loss_type: LossType = option("grpo", "TRL's loss type (dr_grpo: Dr. GRPO).")
    temperature: float = option(1.0, "Sampling temperature of the training completions.")
    lora: bool = option(True, "Train a LoRA adapter (False: all parameters).")
    adapter: str | None = option(None, "PEFT adapter directory to continue training (e.g. an `evotune sft` run's "
                                       "adapter/), so GRPO starts from the same weights as ESSA on that adapter; "
                                       "its own rank, alpha and target modules apply. None: a fresh LoRA.")
    # loop and outputs
    eval_every: int = same_as(TrainConfig, "eval_every", 5)
    checkpoint_every: int = same_as(TrainConfig, "checkpoint_every")

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
        for key in FRESH_ADAPTER if not self.lora else ():
            if hasattr(self, key.name) and key.is_set(self):
                raise ConfigError(f"`{key.name}` is {getattr(self, key.name)!r}, but only a LoRA run reads it, and "
                                  f"this run has `lora: false` (all parameters): remove `{key.name}` (its default is "
                                  f"{default_of(self, key.name)!r}), or set `lora: true`.")
        absolutize_paths(self)  # config.yaml records absolute paths: the run resumes and evaluates from anywhere


# `evotune grpo` with no config: grpo-lora at its own defaults (config/methods.py: the method matrix's GRPO-on-a-LoRA
# arm as it ran, rank 8 on q/k/v/o, 8 prompts x 8 completions, temperature 0.7, no KL term, at the learning rate its
# tuning chose on the validation split, never the held-out set: bench/results/method_matrix/tune/arithmetic/
# grpo_lora/; tests/config/test_grpo_quickstart.py keeps the two equal) for 10 steps of 2-digit addition.
GRPO_QUICKSTART = {
    "model": "smollm2-135m-instruct", "task": "arithmetic", "lora": True, "iterations": 10, "max_new_tokens": 48,
    "num_eval": 128, "eval_every": 5, "checkpoint_every": 5,
}

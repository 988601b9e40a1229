"""Typed run configuration: one dataclass, help text once, checks that say what to set.

A YAML file gives any subset of the keys; `--set key=value` overrides them (values
parsed as YAML, so `--set antithetic=true --set sigma=2e-3` work).
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError


def _opt(default: Any, help: str, **kwargs: Any) -> Any:
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help}, **kwargs)
    return field(default=default, metadata={"help": help}, **kwargs)


class ConfigMixin:
    """What every typed config shares: dict round trip, help text, and from_dict with checked keys."""

    KIND = ""  # e.g. "SFT": named in unknown-key errors

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def help(cls) -> dict[str, str]:
        return {f.name: f.metadata["help"] for f in dataclasses.fields(cls)}

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config"):
        """Unknown keys name the closest valid one; values are type-checked against the defaults."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        for key in values:
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"did you mean `{close[0]}`?" if close else f"valid keys: {', '.join(known)}."
                kind = f"{cls.KIND} " if cls.KIND else ""
                raise ConfigError(f"{source}: unknown {kind}key `{key}`; {hint}")
        coerced = {}
        for key, value in values.items():
            default = known[key].default if known[key].default is not dataclasses.MISSING else None
            coerced[key] = _coerce(key, value, default)
        return cls(**coerced)


@dataclass
class TrainConfig(ConfigMixin):
    # what to train, on what
    model: str = _opt("smollm2-135m-instruct", "Model: built-in alias, local directory, .gguf file, or hub id.")
    task: str = _opt("arithmetic", "Task name: arithmetic, countdown, conciseness, gsm8k, math, ifeval, "
                                   "reward_model, or custom.")
    task_args: dict = _opt({}, "Extra arguments of the built-in task (e.g. {digits: 3}).")
    dataset: str | None = _opt(None, "custom / gsm8k / math / ifeval / reward_model: JSONL/CSV/parquet path or "
                                     "datasets name (custom needs a `prompt` column).")
    eval_dataset: str | None = _opt(None, "Held-out dataset for those tasks (default: a seeded split of `dataset`).")
    reward_fns: list = _opt([], "Reward functions as dotted import paths with TRL's signature.")
    reward_weights: list = _opt([], "One weight per reward function (default 1.0 each).")
    # search space and strategy
    space: str = _opt("full", "Search space: full (all or selected weights), lora (every LoRA entry), svd_lora "
                              "(ESSA: the LoRA factors' singular values).")
    parameters: list = _opt([], "Regexes of parameter names to train (empty: all parameters).")
    exclude_parameters: list = _opt([], "Regexes of parameter names to leave untouched.")
    adapter: str | None = _opt(None, "lora/svd_lora: PEFT adapter directory to start from (e.g. an `evotune sft` "
                                     "run's adapter/); None: a fresh LoRA adapter.")
    lora_rank: int = _opt(8, "Rank of a fresh LoRA adapter (ESSA's grid: 2-64).")
    lora_alpha: float = _opt(16.0, "LoRA scaling numerator of a fresh adapter (scale = lora_alpha / lora_rank).")
    lora_target_modules: list = _opt(["q_proj", "k_proj", "v_proj", "o_proj"], "Modules a fresh LoRA adapts.")
    lora_init: str = _opt("kaiming", "Fresh adapter start: kaiming (PEFT's default, B = 0: ESSA's no-SFT start) "
                                     "or gaussian.")
    singular_value_fraction: float = _opt(1.0, "svd_lora: fraction of each factor's singular values searched "
                                               "(ESSA's alpha), rounded down.")
    strategy: str = _opt("openes", "Search strategy: openes (seeds + mean) or cma (pycma, small vector spaces).")
    population_size: int = _opt(30, "Candidates per iteration (N).")
    sigma: float = _opt(1e-3, "Noise scale of the perturbations.")
    learning_rate: float = _opt(5e-4, "Step size (sigma folded in, as in Qiu et al. 2025).")
    antithetic: bool = _opt(False, "Mirrored sampling: evaluate +eps and -eps (population_size must be even).")
    fitness_shaping: str = _opt("z_score", "Reward shaping in the population: z_score, centered_rank, none.")
    optimizer: str = _opt("sgd", "Update rule on the mean: sgd or adam.")
    weight_decay: float = _opt(0.0, "Decoupled weight decay on the trained parameters.")
    noise: str = _opt("gaussian", "Perturbation distribution: gaussian (paper) or rademacher (cheaper on CPU).")
    cma_diagonal: bool = _opt(False, "cma: separable (diagonal covariance) CMA-ES, linear cost in the dimension.")
    # the loop
    iterations: int = _opt(100, "Number of ES iterations.")
    batch_size: int = _opt(32, "Prompts per candidate per iteration (reward = mean over them).")
    max_new_tokens: int = _opt(32, "Tokens generated per prompt (greedy decoding).")
    generation_batch_size: int | None = _opt(None, "Prompts per generate() call (default: the whole batch).")
    population_batch_size: int | None = _opt(None, "lora/svd_lora: candidates generated together in one batched "
                                                  "generate, one adapter per row (hf default: one at a time; vllm default: the "
                                                  "whole population as LoRA requests of one engine batch).")
    num_eval: int | None = _opt(None, "Held-out prompts used for evaluation (None: the task's default).")
    eval_every: int = _opt(10, "Evaluate every this many iterations (0: only before and after training).")
    checkpoint_every: int = _opt(10, "Write a resumable checkpoint every this many iterations.")
    seed: int = _opt(0, "Seeds the data order, the noise and the task generators.")
    # where it runs
    backend: str = _opt("hf", "Generation backend: hf (transformers) or vllm (CUDA; space full needs "
                                   "optimizer sgd).")
    dtype: str = _opt("bfloat16", "Weights dtype for generation: float32, bfloat16, float16 (the mean stays fp32).")
    device: str = _opt("auto", "cpu, cuda, cuda:N, or auto (cuda when available).")
    quantization: str = _opt("none", "lora/svd_lora base weights: none, int8 or int4 (bitsandbytes; needs CUDA).")
    workers: int = _opt(1, "Model replicas evaluating the population (more than 1 needs distributed: ray).")
    distributed: str = _opt("local", "local (this process) or ray (an actor pool of `workers` replicas).")
    ray_address: str | None = _opt(None, "ray: cluster to join (default: $RAY_ADDRESS, else a local Ray instance).")
    checksum_every: int = _opt(10, "ray: compare every replica's weights with the driver's every this many "
                                   "iterations (0: never).")
    worker_num_cpus: float = _opt(1.0, "ray: CPU cores per replica (also its torch threads).")
    worker_num_gpus: float | None = _opt(None, "ray: GPUs per replica (None: 1 when CUDA is available, else 0).")
    report_to: list = _opt(["tensorboard"], "Loggers besides metrics.jsonl: tensorboard (or [] for none).")

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        from .backends.models import DTYPES
        from .spaces.noise import NOISE_KINDS
        from .strategies import OPTIMIZERS, SHAPINGS, STRATEGIES
        from .spaces import SPACES

        choices = {"space": SPACES, "strategy": STRATEGIES, "optimizer": OPTIMIZERS,
                   "fitness_shaping": SHAPINGS, "noise": NOISE_KINDS, "dtype": DTYPES, "backend": ("hf", "vllm")}
        for key, allowed in choices.items():
            if getattr(self, key) not in allowed:
                raise ConfigError(f"`{key}` is {getattr(self, key)!r}; set it to one of: {', '.join(allowed)}.")
        self._validate_adapter_keys()
        if self.strategy == "cma" and self.space == "full":
            raise ConfigError("`strategy: cma` searches a small vector (pycma keeps a covariance over it), not all "
                              "of a model's weights; set `strategy: openes` for `space: full`.")
        if self.population_size < 2:
            raise ConfigError(f"`population_size` is {self.population_size}; ES needs at least 2 candidates to "
                              "compare (the paper uses 30).")
        if not self.sigma > 0:
            raise ConfigError(f"`sigma` is {self.sigma}; it must be > 0 (the paper uses 1e-3).")
        if not self.learning_rate >= 0:
            raise ConfigError(f"`learning_rate` is {self.learning_rate}; it must be >= 0.")
        if self.antithetic and self.population_size % 2:
            raise ConfigError(f"`antithetic` sampling pairs +eps/-eps, so `population_size` must be even; set it "
                              f"to {self.population_size + 1}.")
        for key in ("iterations", "batch_size", "max_new_tokens"):
            if getattr(self, key) < 1:
                raise ConfigError(f"`{key}` is {getattr(self, key)}; it must be at least 1.")
        for key in ("eval_every", "checkpoint_every"):
            if getattr(self, key) < 0:
                raise ConfigError(f"`{key}` is {getattr(self, key)}; use 0 to turn it off, or a positive number.")
        if self.backend == "vllm" and self.space == "full" and self.optimizer != "sgd":
            raise ConfigError("`backend: vllm` with `space: full` perturbs the engine's own weights and updates them "
                              "with the stateless `optimizer: sgd`; set it, or use `backend: hf` for Adam.")
        if self.backend == "vllm" and self.quantization == "int8":
            raise ConfigError("`quantization: int8` has no in-flight form in vLLM (its bitsandbytes loader is 4-bit "
                              "only): set `quantization: int4`, `backend: hf`, or a pre-quantized INT8 `model`.")
        if self.distributed not in ("local", "ray"):
            raise ConfigError(f"`distributed` is {self.distributed!r}; set it to local or ray.")
        if self.workers < 1 or (self.workers > 1 and self.distributed != "ray"):
            raise ConfigError(f"`workers` is {self.workers}; more than one replica runs on Ray: set `distributed: "
                              "ray` (pip install 'evotune[ray]'), or `workers: 1`.")
        if self.distributed == "ray" and self.population_batch_size:
            raise ConfigError("`population_batch_size` batches candidates inside one process; with `distributed: "
                              "ray` each replica evaluates one candidate at a time. Remove one of the two.")
        if self.task == "custom" and not (self.dataset and self.reward_fns):
            raise ConfigError("`task: custom` needs `dataset` (a file with a `prompt` column) and `reward_fns` "
                              "(dotted import paths of functions fn(prompts, completions, **columns)).")
        if self.reward_weights and len(self.reward_weights) != len(self.reward_fns):
            raise ConfigError(f"`reward_weights` has {len(self.reward_weights)} entries but `reward_fns` has "
                              f"{len(self.reward_fns)}; give one weight per function or leave it empty.")
        unknown = set(self.report_to) - {"tensorboard"}
        if unknown:
            raise ConfigError(f"`report_to` has {sorted(unknown)}; supported: tensorboard.")

    def _validate_adapter_keys(self) -> None:
        from .backends.models import QUANTIZATIONS
        from .spaces.lora import LORA_INITS
        from .spaces.svd_lora import searched_count

        if self.space == "full":
            for key, default in (("adapter", None), ("population_batch_size", None), ("quantization", "none")):
                if getattr(self, key) != default:
                    raise ConfigError(f"`{key}` applies to the adapter spaces; set `space: svd_lora` (or lora), or "
                                      f"remove `{key}`.")
        if self.quantization not in QUANTIZATIONS:
            raise ConfigError(f"`quantization` is {self.quantization!r}; set it to one of: {', '.join(QUANTIZATIONS)}.")
        if self.lora_init not in LORA_INITS:
            raise ConfigError(f"`lora_init` is {self.lora_init!r}; set it to one of: {', '.join(LORA_INITS)}.")
        if self.lora_rank < 1 or not self.lora_target_modules:
            raise ConfigError("`lora_rank` must be >= 1 and `lora_target_modules` non-empty (e.g. [q_proj, v_proj]).")
        if not 0 < self.singular_value_fraction <= 1:
            raise ConfigError(f"`singular_value_fraction` is {self.singular_value_fraction}; it must be in (0, 1].")
        if self.space == "svd_lora" and self.adapter is None and searched_count(self.singular_value_fraction,
                                                                                 self.lora_rank) == 0:
            raise ConfigError(f"`singular_value_fraction` {self.singular_value_fraction} of rank {self.lora_rank} "
                              f"rounds down to 0 singular values per factor: nothing to search. Set it to at least "
                              f"{1 / self.lora_rank:g}, or raise `lora_rank`.")
        if self.population_batch_size is not None and self.population_batch_size < 1:
            raise ConfigError(f"`population_batch_size` is {self.population_batch_size}; use a positive number or "
                              "remove it (one candidate at a time).")



def _coerce(key: str, value: Any, default: Any) -> Any:
    """Light type checking from the default's type; ints become floats where floats are expected."""
    if value is None or default is None:
        return value
    expected = type(default)
    if expected is float and isinstance(value, str):  # YAML 1.1 reads `2e-3` (no dot) as a string
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"`{key}` is {value!r}; it must be a number, e.g. {default}.") from None
    if expected is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if expected is float:
        raise ConfigError(f"`{key}` is {value!r}; it must be a number, e.g. {default}.")
    if expected is bool and not isinstance(value, bool):
        raise ConfigError(f"`{key}` is {value!r}; set it to true or false.")
    if expected is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"`{key}` is {value!r}; it must be a whole number.")
    if expected in (list, dict, str) and not isinstance(value, expected):
        raise ConfigError(f"`{key}` is {value!r}; it must be a {expected.__name__}.")
    return value


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--set {pair!r} has no `=`; write --set key=value, e.g. --set sigma=2e-3.")
        key, text = pair.split("=", 1)
        try:
            out[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {pair!r}: the value is not valid YAML ({exc}).") from exc
    return out


def read_config_values(path: str | Path | None, overrides: list[str] | None = None,
                       base: dict[str, Any] | None = None,
                       missing_hint: str = "pass a YAML file path, or only --set keys") -> tuple[dict[str, Any], str]:
    """base <- YAML file <- --set overrides, as raw values, and the name of their source (for errors).

    Shared by every command's config (train, sft, grpo); each then validates with its own dataclass.
    """
    values = dict(base or {})
    source = "config"
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise ConfigError(f"config file {path} does not exist; {missing_hint}.")
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path} must hold a mapping of keys to values, not {type(loaded).__name__}.")
        values.update(loaded)
        source = str(path)
    values.update(parse_overrides(overrides or []))
    return values, source


def load_config(path: str | Path | None, overrides: list[str] | None = None,
                base: dict[str, Any] | None = None) -> TrainConfig:
    """base (e.g. the quickstart) <- YAML file <- --set overrides, then validated."""
    values, source = read_config_values(path, overrides, base,
                                        missing_hint="pass a YAML file path or no config for the quickstart")
    return TrainConfig.from_dict(values, source=source)


# `evotune train` with no config. From the sweep in bench/results/learning_sweep_*: the paper's
# sigma=1e-3/lr=5e-4 barely moves a 135M model in a CPU budget; 2e-3/4e-3 does, and Rademacher
# noise reached the same accuracy with ~25% shorter iterations than Gaussian.
QUICKSTART = {
    "model": "smollm2-135m-instruct", "task": "arithmetic", "population_size": 16, "antithetic": True,
    "sigma": 2e-3, "learning_rate": 4e-3, "noise": "rademacher", "iterations": 10, "batch_size": 32, "max_new_tokens": 10,
    "num_eval": 128, "eval_every": 5, "checkpoint_every": 5,
}

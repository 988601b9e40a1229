"""Cross-field checks that several command configs share (train, grpo, sft): each reads only the keys its
Protocol names, so a config of any command passes through it, and each error names the key and what to set."""

from __future__ import annotations

import re
from dataclasses import fields
from typing import Any, Protocol

from ..errors import ConfigError


class RetentionKeys(Protocol):
    """The keys `check_retention` reads, which every command's config has (RunConfig)."""

    task: str
    retention_tasks: list[str]
    retention_num_eval: int
    retention_kl: bool


RETENTION_TASK_NAMES = ("arithmetic", "countdown", "conciseness", "ifeval")  # the tasks that need no `dataset`


def check_retention(config: RetentionKeys) -> None:
    """retention_tasks: other tasks than `task`, each once, that need no data; KL only where hf scores tokens."""
    for index, name in enumerate(config.retention_tasks):
        if name == config.task:
            raise ConfigError(f"`retention_tasks` has {name}, the trained `task`; it measures other tasks: remove it.")
        if name in config.retention_tasks[:index]:
            raise ConfigError(f"`retention_tasks` has {name} twice; list each task once.")
        if name not in RETENTION_TASK_NAMES:
            raise ConfigError(f"`retention_tasks` has {name}, which needs a `dataset` (retention tasks get none): use "
                              f"one of {', '.join(RETENTION_TASK_NAMES)}, or remove it.")
    if config.retention_num_eval < 1:
        raise ConfigError(f"`retention_num_eval` is {config.retention_num_eval}; it must be at least 1.")
    if config.retention_tasks and config.retention_kl and getattr(config, "backend", "hf") != "hf":
        raise ConfigError("`retention_kl` needs `backend: hf` (it scores token probabilities); with vllm set "
                          "`retention_kl: false` (retain/ task metrics are still logged).")


class QuantizationKeys(Protocol):
    """The keys `check_int4_keys` reads, which TrainConfig and SFTConfig both have."""

    quantization: str
    int4_type: str
    int4_double_quantization: bool
    int4_compute_dtype: str | None


def check_int4_keys(config: QuantizationKeys) -> None:
    """The int4_* keys choose how 4-bit weights are stored and computed: refuse them on any other base."""
    set_keys = [key for key, default in (("int4_type", "nf4"), ("int4_double_quantization", False),
                                         ("int4_compute_dtype", None)) if getattr(config, key) != default]
    if set_keys and config.quantization != "int4":
        raise ConfigError(f"`{set_keys[0]}` applies to `quantization: int4`, and this run has `quantization: "
                          f"{config.quantization}`; set `quantization: int4`, or remove `{set_keys[0]}`.")


def check_device(device: str) -> None:
    """Refuse a device name torch would fail on later (or `meta`, which holds no weights), naming the choices."""
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?|mps", str(device)):
        raise ConfigError(f"`device` is {device!r}; use cpu, cuda, cuda:N (a GPU's index), mps or auto (cuda when "
                          "available, else cpu).")


def resolve_device(device: str) -> str:
    """`auto` -> cuda when available, else cpu; a CUDA device on a machine without CUDA is an error."""
    import torch

    check_device(device)
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"`device` is {device!r} but CUDA is not available; set `device: cpu` (or auto).")
    return device


class RewardKeys(Protocol):
    """The keys `check_rewards` reads, which TrainConfig and the GRPO baseline's config both have."""

    task: str
    task_args: dict[str, Any]
    dataset: str | None
    reward_fns: list[str]
    reward_weights: list[float]
    iterations: int
    max_training_seconds: float
    eval_every: int
    checkpoint_every: int


def check_rewards(config: RewardKeys) -> None:
    """The keys shared by train and grpo: custom tasks need data and functions, one weight per function, task_args
    apart from the top-level keys."""
    if config.task == "custom" and not (config.dataset and config.reward_fns):
        raise ConfigError("`task: custom` needs `dataset` (a file with a `prompt` column) and `reward_fns` "
                          "(dotted import paths of functions fn(prompts, completions, **columns)).")
    if config.reward_weights and len(config.reward_weights) != len(config.reward_fns):
        raise ConfigError(f"`reward_weights` has {len(config.reward_weights)} entries but `reward_fns` has "
                          f"{len(config.reward_fns)}; give one weight per function or leave it empty.")
    # get_task receives these keys itself: the same name inside task_args would be given twice
    for key in sorted(set(config.task_args) & {field.name for field in fields(config)}):
        raise ConfigError(f"`task_args` sets `{key}`, which is a key of its own here: set `{key}: "
                          f"{config.task_args[key]}` at the top level (--set {key}=...) and drop it from task_args.")
    if config.iterations < 1:
        raise ConfigError(f"`iterations` is {config.iterations}; it must be at least 1.")
    if config.max_training_seconds < 0:
        raise ConfigError(f"`max_training_seconds` is {config.max_training_seconds}; set a positive number of seconds, "
                          "or 0 for no limit.")
    for key in ("eval_every", "checkpoint_every", "log_samples"):
        if getattr(config, key, 0) < 0:
            raise ConfigError(f"`{key}` is {getattr(config, key)}; use 0 to turn it off, or a positive number.")


def check_regexes(key: str, patterns: list[str]) -> None:
    """Each of a key's regexes compiles; a broken one is named with Python's reason."""
    import re

    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as error:
            raise ConfigError(f"`{key}` holds {pattern!r}, which is not a regular expression ({error}); escape "
                              f"special characters (e.g. `\\(`), or give plain parameter-name fragments.") from None


def check_population_batch_size(value: Any, space: str) -> None:
    """`population_batch_size`: null, a whole number, or `auto` (space full: from the GPU's free memory)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return
    if value != "auto":
        raise ConfigError(f"`population_batch_size` is {value!r}; it must be a whole number, auto (space full) or "
                          "null (the default).")
    if space != "full":
        raise ConfigError(f"`population_batch_size: auto` sizes batches of full-rank candidates from free GPU memory "
                          f"(`space: full`); for `space: {space}` give a whole number, or remove it.")


def check_ray_address(address: str | None) -> None:
    """`ray_address` must name a cluster in a form Ray reads: HOST:PORT, ray://HOST:PORT, [IPv6]:PORT or auto;
    checked before anything starts, since ray.init reports a bad one only as a traceback."""
    if address is None or address == "auto":
        return
    form = ("give HOST:PORT of the cluster's head (e.g. 10.0.0.5:6379, the port `ray start --head` printed), "
            "ray://HOST:10001 for Ray Client, or auto for the cluster `ray start` runs on this machine; leave it unset "
            "for a local Ray instance")
    text = address.removeprefix("ray://")
    host, separator, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not separator or not host or " " in host or "/" in host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"`ray_address` is {address!r}, which is not a cluster address: {form}.")


MAX_RAY_TIMEOUT = 86400.0


def check_placement(config: Any) -> None:
    """The keys that place the candidates' work: the device, the GPU share, and Ray's replicas, cluster and work
    units."""
    check_device(config.device)
    if not 0 < config.gpu_memory_utilization <= 1:
        raise ConfigError(f"`gpu_memory_utilization` is {config.gpu_memory_utilization}; set a fraction in (0, 1], "
                          "e.g. 0.4 for two engines on one GPU.")
    if config.workers < 1:
        raise ConfigError(f"`workers` is {config.workers}; give the number of model replicas that evaluate the "
                          "population, at least 1.")
    if config.workers > 1 and config.distributed != "ray":
        raise ConfigError(f"`workers` is {config.workers}; more than one replica runs on Ray: set `distributed: "
                          "ray` (pip install 'evotune[ray]'), or `workers: 1`.")
    check_ray_address(config.ray_address)
    if not 0 < config.ray_timeout <= MAX_RAY_TIMEOUT:  # ten times it must still be a date Python can hold
        raise ConfigError(f"`ray_timeout` is {config.ray_timeout}; give the seconds to wait for a cluster, from "
                          f"above 0 to {MAX_RAY_TIMEOUT:g} (a day), e.g. 30.")
    if config.distributed == "ray" and config.population_batch_size:
        raise ConfigError("`population_batch_size` batches candidates inside one process; with `distributed: "
                          "ray` each replica evaluates one candidate at a time. Remove one of the two.")
    if config.checksum_every < 0:
        raise ConfigError(f"`checksum_every` is {config.checksum_every}; use 0 to turn it off, or a positive "
                          "number.")
    if not config.worker_num_cpus > 0 or (config.worker_num_gpus is not None and config.worker_num_gpus < 0):
        raise ConfigError(f"`worker_num_cpus` is {config.worker_num_cpus} and `worker_num_gpus` "
                          f"{config.worker_num_gpus}; give a positive number of CPUs and a number of GPUs >= 0.")
    if config.prompt_shards is not None and config.prompt_shards < 1:
        raise ConfigError(f"`prompt_shards` is {config.prompt_shards}; give at least 1 work unit per candidate, or "
                          "null (automatic).")
    if not (config.straggler_factor == 0 or config.straggler_factor > 1):
        raise ConfigError(f"`straggler_factor` is {config.straggler_factor}; give a factor above 1 (a unit is sent "
                          "again after that many median unit times), or 0 for no re-sends.")

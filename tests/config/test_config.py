"""Run configs: one base, checks from the annotations, Literal choices in sync with the registries, no torch
on import, and `dtype: auto` resolved per machine."""

from __future__ import annotations

import subprocess
import sys
from typing import get_args, get_origin

import pytest
import yaml

from evotune.baselines.grpo import LOSS_TYPES, GRPORunConfig, LossType
from evotune.config import (
    MAX_SIGMA,
    BackendName,
    DtypeName,
    FitnessShaping,
    LoraInit,
    NoiseKind,
    OptimizerName,
    Quantization,
    RunConfig,
    SpaceName,
    StrategyName,
    TaskName,
    TrainConfig,
    load_config,
    searched_count,
)
from evotune.config.fields import check_value
from evotune.errors import ConfigError
from evotune.sft import SFTConfig

CONFIGS = [(TrainConfig, {}), (SFTConfig, {"task": "arithmetic"}), (GRPORunConfig, {})]


def test_config_module_and_its_checks_do_not_import_torch():
    script = ("import sys, evotune.config as config\n"
              "config.TrainConfig(space='svd_lora', lora_init='gaussian', dtype='auto')\n"
              "config.load_config(None, ['sigma=2e-3', 'noise=rademacher'])\n"
              "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_every_registry_holds_exactly_its_literals_choices():
    from evotune.backends import BACKENDS
    from evotune.backends.models import DTYPES, QUANTIZATIONS
    from evotune.optimizers import OPTIMIZERS
    from evotune.spaces import SPACES
    from evotune.spaces.lora import LORA_INITS
    from evotune.spaces.noise import NOISE_KINDS
    from evotune.strategies import SHAPINGS, STRATEGIES
    from evotune.tasks import TASKS

    pairs = [(SPACES, SpaceName), (STRATEGIES, StrategyName), (OPTIMIZERS, OptimizerName),
             (SHAPINGS, FitnessShaping), (NOISE_KINDS, NoiseKind), (DTYPES, DtypeName),
             (QUANTIZATIONS, Quantization), (LORA_INITS, LoraInit), (TASKS, TaskName), (LOSS_TYPES, LossType),
             ({*BACKENDS, "vllm"}, BackendName)]  # vllm's backend is imported only when chosen
    for registry, literal in pairs:
        assert set(registry) == set(get_args(literal)), (sorted(registry), get_args(literal))


def test_searched_count_matches_the_svd_lora_space():
    from evotune.spaces import svd_lora

    for rank in range(1, 65):
        for alpha in (0.01, 0.1, 0.125, 0.2, 0.25, 0.29, 0.3, 1 / 3, 0.5, 0.7, 0.99, 1.0):
            assert searched_count(alpha, rank) == svd_lora.searched_count(alpha, rank), (alpha, rank)


def test_the_shared_keys_are_declared_once_in_the_base():
    base = RunConfig.help()
    for config, _ in CONFIGS:
        assert set(base) <= set(config.help())
    # only SFT gives `task`, `dataset` and `max_new_tokens` (it generates only to evaluate) another meaning, and
    # SFT/GRPO another `dtype` default
    for key in set(base) - {"task", "dataset", "dtype", "max_new_tokens"}:
        assert SFTConfig.help()[key] == GRPORunConfig.help()[key] == TrainConfig.help()[key] == base[key], key
    assert GRPORunConfig.help()["max_new_tokens"] == TrainConfig.help()["max_new_tokens"] == base["max_new_tokens"]
    for key in ("eval_dataset", "reward_fns", "reward_weights", "eval_every", "checkpoint_every"):
        assert GRPORunConfig.help()[key] == TrainConfig.help()[key], key
    # `iterations` counts ES iterations in train, GRPO optimizer steps in grpo: each command's help says its own
    assert "GRPO optimizer steps" in GRPORunConfig.help()["iterations"]
    assert "ES: iterations" in TrainConfig.help()["iterations"]
    assert "SFT generates nothing" in SFTConfig.help()["max_new_tokens"]
    for key in ("lora_init", "weight_decay", "device"):
        assert SFTConfig.help()[key] == TrainConfig.help()[key], key
    assert GRPORunConfig().iterations == 20 and TrainConfig().iterations == 100  # same help, own default


def test_fields_carry_their_element_types():
    types = TrainConfig.field_types()
    assert types["reward_fns"] == list[str] and types["reward_weights"] == list[float]
    assert types["lora_target_modules"] == list[str] and get_origin(types["task_args"]) is dict
    for config, _ in CONFIGS:
        assert all(hint not in (list, dict) for hint in config.field_types().values()), config


@pytest.mark.parametrize("config, required", CONFIGS)
def test_every_literal_drives_the_check(config, required):
    choices = config.choices()
    assert {"dtype", "task", "report_to", "lora_init" if config is not GRPORunConfig else "loss_type"} <= set(choices)
    for key, allowed in choices.items():
        value = ["nope"] if get_origin(config.field_types()[key]) is list else "nope"  # report_to, retention_tasks
        with pytest.raises(ConfigError, match=f"`{key}(\\[0\\])?` is 'nope'; set it to one of: " + ", ".join(allowed)):
            config.from_dict({**required, key: value})
    assert config.from_dict({**required, "dtype": "bfloat16", "report_to": []}).dtype == "bfloat16"


def test_keys_command_lists_every_key_with_its_default_choices_and_help(capsys):
    from evotune.cli.main import main

    for command, config in (("train", TrainConfig), ("sft", SFTConfig), ("grpo", GRPORunConfig)):
        assert main(["keys", command]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert [line.split(" ", 1)[0] for line in lines] == list(config.help()), command
        by_key = {line.split(" ", 1)[0]: line for line in lines}
        for key, help_text in config.help().items():
            assert by_key[key].endswith(help_text)
        for key, allowed in config.choices().items():
            assert f"one of: {', '.join(allowed)})" in by_key[key], key
    assert main(["keys"]) == 0
    assert "dtype (default 'auto'; one of: auto, float32, bfloat16, float16)" in capsys.readouterr().out


def float_keys(config) -> list[str]:
    return [key for key, hint in config.field_types().items() if hint in (float, float | None)]


@pytest.mark.parametrize("config, required", CONFIGS)
@pytest.mark.parametrize("text", [".inf", "-.inf", ".nan", "1e999"])
def test_non_finite_numbers_are_refused_in_every_float_key(config, required, text):
    keys = float_keys(config)
    assert "learning_rate" in keys and "lora_alpha" in keys
    for key in keys:
        value = yaml.safe_load(f"value: {text}")["value"]  # what a YAML file or --set gives
        with pytest.raises(ConfigError, match=f"`{key}` is .*; it must be a finite number"):
            config.from_dict({**required, key: value})
    if "reward_weights" in config.help():  # and in lists of floats
        with pytest.raises(ConfigError, match=r"`reward_weights\[1\]` is .*; it must be a finite number"):
            config.from_dict({**required, "reward_fns": ["a:f", "b:g"], "reward_weights": [1.0, value]})


def test_yaml_spellings_of_numbers_are_coerced_and_wrong_types_name_the_key():
    config = load_config(None, ["sigma=2e-3", "learning_rate=1", "reward_weights=[1, 2e-1]",
                                "reward_fns=[a:f, b:g]", "worker_num_gpus=1", "distributed=ray"])
    assert config.sigma == 2e-3 and isinstance(config.learning_rate, float)
    assert config.reward_weights == [1.0, 0.2] and all(isinstance(w, float) for w in config.reward_weights)
    assert config.worker_num_gpus == 1.0 and isinstance(config.worker_num_gpus, float)
    # a tuple from Python
    assert TrainConfig(space="lora", lora_target_modules=("q_proj",)).lora_target_modules == ["q_proj"]
    cases = [({"population_size": 2.5}, "`population_size` is 2.5; it must be a whole number"),
             ({"antithetic": "maybe"}, "`antithetic` is 'maybe'; set it to true or false"),
             ({"seed": True}, "`seed` is True; it must be a whole number"),
             ({"sigma": "big"}, "`sigma` is 'big'; it must be a number, e.g. 0.001"),
             ({"sigma": None}, "`sigma` is null; it must be a number"),
             ({"reward_weights": [1, "x"]}, r"`reward_weights\[1\]` is 'x'; it must be a number"),
             ({"reward_fns": "a:f"}, "`reward_fns` is 'a:f'; it must be a list"),
             ({"lora_target_modules": ["q_proj", 3]}, r"`lora_target_modules\[1\]` is 3; it must be text"),
             ({"task_args": [1]}, "`task_args` is \\[1\\]; it must be a mapping"),
             ({"dataset": 5}, "`dataset` is 5; it must be text"),
             ({"adapter": ["a"]}, "`adapter` is \\['a'\\]; it must be text"),
             ({"num_eval": "many"}, "`num_eval` is 'many'; it must be a whole number"),
             ({"generation_batch_size": 1.5}, "`generation_batch_size` is 1.5; it must be a whole number"),
             ({"worker_num_gpus": "two"}, "`worker_num_gpus` is 'two'; it must be a number"),
             ({"ray_address": 1}, "`ray_address` is 1; it must be text")]
    for values, message in cases:
        with pytest.raises(ConfigError, match=message):
            TrainConfig.from_dict(values)
    for key in ("dataset", "eval_dataset", "adapter", "num_eval", "generation_batch_size", "worker_num_gpus"):
        assert getattr(TrainConfig.from_dict({key: None}), key) is None  # the optional keys take null


def test_sft_and_grpo_type_checks_name_the_key():
    with pytest.raises(ConfigError, match="`max_steps` is 1.5; it must be a whole number"):
        SFTConfig(task="arithmetic", max_steps=1.5)
    with pytest.raises(ConfigError, match="`num_train` is 'all'; it must be a whole number"):
        SFTConfig(task="arithmetic", num_train="all")
    with pytest.raises(ConfigError, match="`task` is 3; set it to one of"):
        SFTConfig(task=3)
    with pytest.raises(ConfigError, match="`lora` is 'yes'; set it to true or false"):
        GRPORunConfig(lora="yes")
    with pytest.raises(ConfigError, match="`temperature` is 0.0; sampling needs a temperature > 0"):
        GRPORunConfig(temperature=0)
    assert GRPORunConfig.from_dict({"beta": "4e-2"}).beta == 0.04


def test_sigma_past_the_documented_limit_is_refused():
    assert TrainConfig(sigma=MAX_SIGMA).sigma == MAX_SIGMA
    with pytest.raises(ConfigError, match="`sigma` is 1e\\+300; it must be > 0 and at most 1000: noise larger"):
        load_config(None, ["sigma=1e300"])


def test_lowrank_keys_are_checked():
    assert TrainConfig(space="lowrank", perturbation_rank=2, population_batch_size=4).perturbation_rank == 2
    with pytest.raises(ConfigError, match="`perturbation_rank` is 0; it must be at least 1"):
        TrainConfig(space="lowrank", perturbation_rank=0)
    with pytest.raises(ConfigError, match="set `strategy: openes` for `space: lowrank`"):
        TrainConfig(space="lowrank", strategy="cma")
    with pytest.raises(ConfigError, match="`adapter` applies to the adapter spaces"):
        TrainConfig(space="lowrank", adapter="some/dir")


def test_check_value_reads_optional_and_nested_annotations():
    assert check_value("k", None, int | None) is None
    assert check_value("k", 3, float | None) == 3.0
    assert check_value("k", {"digits": 3}, dict[str, int]) == {"digits": 3}
    with pytest.raises(ConfigError, match="`k.digits` is 'x'; it must be a whole number"):
        check_value("k", {"digits": "x"}, dict[str, int])


# --- dtype: auto ---------------------------------------------------------------------------------------------


def test_auto_is_the_train_default_and_sft_and_grpo_stay_float32():
    assert TrainConfig().dtype == "auto" and load_config(None, ["dtype=auto"]).dtype == "auto"
    assert SFTConfig(task="arithmetic").dtype == "float32" and GRPORunConfig().dtype == "float32"
    assert SFTConfig(task="arithmetic", dtype="auto").dtype == "auto" and GRPORunConfig(dtype="auto").dtype == "auto"


@pytest.mark.parametrize("flags, expected", [
    ({"sse4_2", "avx", "avx2", "fma"}, "float32"),  # AVX2-only (e.g. AMD EPYC Rome): bfloat16 is emulated
    ({"avx2", "avx512f", "avx512bw"}, "float32"),  # AVX-512 without its bf16 extension
    # native bf16 dot products but no AMX: measured slower than float32 (bench/results/speed/dtype_speed_*)
    ({"avx2", "avx512f", "avx512_bf16", "avx512_fp16"}, "float32"),
    ({"avx2", "avx512_bf16", "amx_tile", "amx_bf16"}, "bfloat16"),  # Sapphire Rapids with AMX
    ({"avx2", "amx_bf16"}, "bfloat16"),
    (set(), "float32"),  # flags unknown (not Linux)
])
def test_auto_on_cpu_follows_the_native_bf16_flags(flags, expected):
    from evotune.backends.models import auto_dtype

    dtype, why = auto_dtype("cpu", frozenset(flags))
    assert dtype == expected and why


def test_auto_on_cuda_prefers_bfloat16_then_float16():
    from evotune.backends.models import auto_dtype

    assert auto_dtype("cuda", cuda_bf16=True)[0] == "bfloat16"
    assert auto_dtype("cuda", cuda_bf16=False)[0] == "float16"


def test_resolve_dtype_reads_the_machine_and_says_its_choice_once(monkeypatch, capsys):
    from evotune.backends import models

    monkeypatch.setattr(models, "cpu_flags", lambda: frozenset({"avx2", "amx_bf16"}))
    models._announce.cache_clear()
    assert models.resolve_dtype("auto", "cpu") == "bfloat16"
    assert models.resolve_dtype("auto", "cpu") == "bfloat16"
    assert capsys.readouterr().err == "evotune: dtype auto -> bfloat16 (CPU has amx_bf16)\n"
    monkeypatch.setattr(models, "cpu_flags", lambda: frozenset({"avx2"}))
    assert models.resolve_dtype("auto", "cpu") == "float32"
    assert "dtype auto -> float32" in capsys.readouterr().err
    assert models.resolve_dtype("float16", "cpu") == "float16" and capsys.readouterr().err == ""
    with pytest.raises(ConfigError, match="`dtype` is 'fp8'; set it to one of auto, float32, bfloat16, float16"):
        models.resolve_dtype("fp8")


def test_cpu_flags_come_from_proc_cpuinfo_on_linux():
    from pathlib import Path

    from evotune.backends.models import cpu_flags

    if not Path("/proc/cpuinfo").exists():
        pytest.skip("no /proc/cpuinfo here")
    text = Path("/proc/cpuinfo").read_text()
    line = next((line for line in text.splitlines() if line.startswith(("flags", "Features"))), None)
    assert cpu_flags() == (frozenset(line.split(":", 1)[1].split()) if line else frozenset())


def test_a_model_loads_with_auto(tiny_model_dir):
    import torch

    from evotune.backends.models import load_model, resolve_dtype

    model, _ = load_model(tiny_model_dir, dtype="auto", device="cpu")
    assert {p.dtype for p in model.parameters()} == {getattr(torch, resolve_dtype("auto", "cpu"))}


@pytest.mark.parametrize("config_class", [TrainConfig, GRPORunConfig])
def test_task_args_cannot_repeat_a_top_level_key(config_class):
    """train and grpo hand `dataset`, `seed`, ... to the task themselves: inside task_args they would collide."""
    with pytest.raises(ConfigError, match=r"`task_args` sets `dataset`, which is a key of its own here: set "
                                          r"`dataset: gsm8k/train.jsonl` at the top level \(--set dataset=...\)"):
        config_class.from_dict({"task": "gsm8k", "task_args": {"dataset": "gsm8k/train.jsonl"}})
    config = config_class.from_dict({"task": "gsm8k", "dataset": "gsm8k/train.jsonl", "task_args": {"digits": 3}})
    assert config.dataset == "gsm8k/train.jsonl" and config.task_args == {"digits": 3}
    SFTConfig(task="gsm8k", task_args={"dataset": "gsm8k/train.jsonl"})  # sft's `dataset` is its own SFT data

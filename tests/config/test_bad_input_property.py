"""Bad input generated from the configs' own field metadata (types, choices), not listed by hand: Hypothesis draws
values for every key of train, sft and grpo (negatives, zero, NaN, infinities, huge numbers, wrong types, unknown
choices, broken regexes, and values of the right type) and each command either accepts the config or stops with one
`evotune: error:` line, never a traceback.

The fast tier checks config validation (`--print-config`, which resolves and validates everything a run would
before it starts) and the other commands' own options (eval's, compare's, sweep's grid, doctor's and export's
paths) up to the point where their work would begin; the engine tier runs a few drawn configs for real on the tiny
model. GENERATED counts every example drawn, for the round's table (bench/reliability/round5.py).
"""

from __future__ import annotations

import json
import math
import os
import re
import types
import typing
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evotune.cli.main import main
from evotune.config.grpo import GRPORunConfig
from evotune.config.sft import SFTConfig
from evotune.config.train import TrainConfig

CONFIGS = {"train": TrainConfig, "sft": SFTConfig, "grpo": GRPORunConfig}
FAST_EXAMPLES = 150  # per command: the fast tier's bound (config validation only, about 0.01 s each)
DEEP_EXAMPLES = 8  # per command in the engine tier: each a real run on the tiny model (seconds each)
EDGES = [0, -1, -(2**31), 2**63, 10**300, 1e-300, float("nan"), float("inf"), float("-inf"), -0.0, 0.5, True, False,
         None, "", " ", "(", "[a-", "*", "auto", "none", "x" * 300, [], {}, ["("], [1, "a"], {"a": 1}, "1e3"]
GENERATED: dict[str, int] = {}


@pytest.fixture(scope="module", autouse=True)
def report_counts():
    """With EVOTUNE_PROPERTY_COUNTS set (bench/reliability/round5.py), the inputs drawn per command go there."""
    yield
    if os.environ.get("EVOTUNE_PROPERTY_COUNTS"):
        Path(os.environ["EVOTUNE_PROPERTY_COUNTS"]).write_text(json.dumps(GENERATED))


def _values_of(hint: Any, choices: tuple) -> st.SearchStrategy:
    """Values of the key's own type (each Literal's choices among them) and values of every other kind."""
    origin = get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*[_values_of(arg, choices) for arg in get_args(hint) if arg is not type(None)])
    if origin is list:
        return st.lists(_values_of(get_args(hint)[0], choices), max_size=3)
    if choices:
        return st.sampled_from(choices) | st.text(max_size=12)  # an unknown choice as often as a known one
    if hint is bool:
        return st.booleans()
    if hint is int:
        return st.integers(min_value=-(2**70), max_value=2**70)
    if hint is float:
        return st.floats(allow_nan=True, allow_infinity=True)
    return st.text(max_size=20)


def values_for(config: type, key: str) -> st.SearchStrategy:
    hint = config.field_types()[key]
    return _values_of(hint, config.choices().get(key, ())) | st.sampled_from(EDGES)


def as_yaml(value: Any) -> str:
    """--set's VALUE, read back as YAML to the same value (NaN and the infinities as YAML writes them)."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()


def settings_for(examples: int):
    return settings(max_examples=examples, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def assert_one_error_line_or_success(code: int | None, err: str) -> None:
    assert "Traceback" not in err, err
    if code:
        assert code == 2, (code, err)
        # evotune's own line, or argparse's (after its usage lines): `evotune COMMAND: error: ...`
        errors = [line for line in err.splitlines() if re.match(r"evotune( [a-z]+)?: error:", line)]
        assert len(errors) == 1 and err.count("error:") == 1, err


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's usage errors exit 2 with `evotune COMMAND: error: ...`
        code = stop.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("command", sorted(CONFIGS))
def test_drawn_values_for_every_key_validate_or_stop_with_one_error_line(command, capsys, tmp_path):
    config = CONFIGS[command]
    keys = sorted(config.field_types())

    @settings_for(FAST_EXAMPLES)
    @given(data=st.data())
    def check(data):
        chosen = data.draw(st.lists(st.sampled_from(keys), min_size=1, max_size=3, unique=True))
        sets = [f"{key}={as_yaml(data.draw(values_for(config, key), label=key))}" for key in chosen]
        base = ["--set", "task=arithmetic"] if command == "sft" and "task" not in chosen else []
        argv = [command, "--print-config", "--output-dir", str(tmp_path / "run"), *base,
                *[part for pair in sets for part in ("--set", pair)]]
        GENERATED[command] = GENERATED.get(command, 0) + 1
        code, err = run_cli(argv, capsys)
        assert_one_error_line_or_success(code, err)
        assert not (tmp_path / "run").exists()  # validating writes nothing

    check()


# each bad for at least one option of every command below (a count, a budget, a path)
OPTION_VALUES = st.sampled_from(["-1", "0", "nan", "inf", "1e300", "", "(", "abc", "/", "-.inf", "9" * 40])


def test_drawn_values_for_the_other_commands_options_stop_with_one_error_line_before_any_work(capsys, tmp_path):
    argv_of = {
        "eval": lambda value: ["eval", "--model", "smollm2-135m-instruct", "--task", "arithmetic", "--num-eval",
                               value, "--max-new-tokens", value, "--output", str(tmp_path / "e.json")],
        "sweep": lambda value: ["sweep", "--grid", f"sigma={value},{value}", "--seeds", value, "--output-dir",
                                str(tmp_path / "sweep"), "--parallel", value],
        "compare": lambda value: ["compare", str(tmp_path / "missing-run"), "--output-dir", str(tmp_path / "cmp"),
                                  "--budget", value],
        "export": lambda value: ["export", str(tmp_path / value), "--output-dir", str(tmp_path / "out")],
        "doctor": lambda value: ["doctor", "--work-dir", "/proc/" + value, "--checks", "hf"],
    }

    @settings_for(12)
    @given(command=st.sampled_from(sorted(argv_of)), value=OPTION_VALUES)
    def check(command, value):
        GENERATED[command] = GENERATED.get(command, 0) + 1
        code, err = run_cli(argv_of[command](value), capsys)
        assert code == 2, (command, value, code, err)  # every drawn value is bad for at least one option
        assert_one_error_line_or_success(code, err)

    check()


# what a real run of each command needs to stay tiny; a drawn key replaces the one here
TINY_RUN = {"train": {"population_size": 4, "antithetic": True, "iterations": 1, "batch_size": 2, "max_new_tokens": 4,
                      "num_eval": 2, "eval_every": 0, "report_to": [], "dtype": "float32", "task": "conciseness"},
            "grpo": {"batch_size": 2, "num_generations": 2, "iterations": 1, "max_new_tokens": 4, "num_eval": 2,
                     "report_to": [], "task": "conciseness"},
            "sft": {"task": "arithmetic", "max_steps": 1, "batch_size": 2, "num_train": 4, "num_eval": 2,
                    "report_to": [], "checkpoint_every": 0}}
# keys whose drawn values would make a real run reach outside the machine or wait on it, or set how long and how
# large it is (a drawn 2**70 iterations runs for ever): the fast tier validates those
NOT_DRAWN_FOR_REAL = {"model", "ray_address", "distributed", "backend", "device", "report_to", "adapter",
                      "reward_fns", "dataset", "eval_dataset", "tensor_parallel_size", "workers", "iterations",
                      "max_steps", "epochs", "population_size", "batch_size", "num_train", "max_new_tokens",
                      "eval_max_new_tokens", "num_eval", "num_generations", "retention_num_eval", "retention_tasks",
                      "generation_batch_size", "population_batch_size", "max_training_seconds", "prompt_shards",
                      "perturbation_rank", "lora_rank", "gradient_accumulation_steps", "checkpoint_every",
                      "eval_every", "log_samples", "quantization", "compile_generation"}


@pytest.mark.engine  # real runs on the tiny model
@pytest.mark.parametrize("command", sorted(CONFIGS))
def test_drawn_values_run_or_stop_with_one_error_line_for_real(command, capsys, tmp_path, tiny_model_dir):
    config = CONFIGS[command]
    keys = sorted(set(config.field_types()) - NOT_DRAWN_FOR_REAL)
    runs = iter(range(10**6))

    @settings_for(DEEP_EXAMPLES)
    @given(data=st.data())
    def check(data):
        chosen = data.draw(st.lists(st.sampled_from(keys), min_size=1, max_size=2, unique=True))
        values = {**TINY_RUN[command], "model": tiny_model_dir}
        values.update({key: data.draw(values_for(config, key), label=key) for key in chosen})
        sets = [part for key, value in values.items() for part in ("--set", f"{key}={as_yaml(value)}")]
        GENERATED[f"{command} (run)"] = GENERATED.get(f"{command} (run)", 0) + 1
        code, err = run_cli([command, "--output-dir", str(tmp_path / f"run{next(runs)}"), *sets], capsys)
        assert_one_error_line_or_success(code, err)

    check()

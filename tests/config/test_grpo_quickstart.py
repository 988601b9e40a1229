"""`evotune grpo` without a config runs grpo-lora at its own defaults, the method matrix's GRPO-on-a-LoRA arm at the
learning rate its tuning chose, and says so; a config that names or makes a method gets that method's defaults."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from bench.method_matrix.arms import COMMON, LORA, METHODS
from bench.method_matrix.run import selection
from evotune.baselines.grpo import load_grpo_config
from evotune.cli.main import _note_method, main
from evotune.config.grpo import GRPO_QUICKSTART, GRPORunConfig
from evotune.config.methods import METHODS as EVOTUNE_METHODS

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "method_matrix"


@pytest.mark.parametrize("arm, method", [("grpo_lora", "grpo-lora"), ("grpo_full", "grpo-full")])
def test_each_grpo_methods_defaults_are_the_studys_arm_at_its_chosen_learning_rate(arm, method):
    chosen = selection(RESULTS, arm)
    assert chosen is not None, f"the {arm} tuning runs have result files"
    study = {**COMMON, **METHODS[arm]["keys"], **METHODS[arm]["grid"][chosen]}
    defaults = EVOTUNE_METHODS[method].values()
    assert defaults and all(study[key] == value for key, value in defaults.items()), (defaults, study)
    quickstart = GRPORunConfig.from_dict({**GRPO_QUICKSTART, "lora": study["lora"]})
    assert quickstart.method == method and quickstart.learning_rate == study["learning_rate"]
    for key, value in LORA.items() if study["lora"] else ():  # the adapter's shape: the dataclass defaults
        assert getattr(quickstart, key) == value, key
    assert quickstart.dtype == COMMON["dtype"]


def test_print_config_without_a_config_shows_the_quickstart(tmp_path, capsys):
    assert main(["grpo", "--output-dir", str(tmp_path / "run"), "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert {key: printed[key] for key in GRPO_QUICKSTART} == GRPO_QUICKSTART
    assert printed["method"] == "grpo-lora" and printed["learning_rate"] == 1e-3 and printed["temperature"] == 0.7


def test_no_config_says_it_runs_the_quickstart(capsys):
    args = argparse.Namespace(config=None, set=[], subcommand="grpo")
    _note_method(args, GRPORunConfig.from_dict(GRPO_QUICKSTART))
    note = " ".join(capsys.readouterr().err.split())
    assert "GRPO's quickstart, grpo-lora" in note and "learning_rate 0.001" in note and "temperature 0.7" in note
    assert "all 64 completions at once; where memory is short, `--set gradient_accumulation_steps=4`" in note
    sliced = GRPORunConfig.from_dict({**GRPO_QUICKSTART, "gradient_accumulation_steps": 4})
    _note_method(args, sliced)
    assert "gradient_accumulation_steps=4" not in capsys.readouterr().err  # already sliced: nothing to suggest


@pytest.mark.parametrize("given, method, learning_rate", [
    ({"task": "arithmetic"}, "grpo-lora", 1e-3),
    ({"lora": False}, "grpo-full", 3e-5),
    ({"method": "grpo-full", "learning_rate": 1e-4}, "grpo-full", 1e-4),  # a key the config gives wins
])
def test_a_config_gets_its_methods_defaults_and_is_told_which(tmp_path, capsys, given, method, learning_rate):
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(given))
    config = load_grpo_config(str(path), [])
    assert config.method == method and config.learning_rate == learning_rate and config.temperature == 0.7
    _note_method(argparse.Namespace(config=str(path), set=[], subcommand="grpo"), config)
    note = " ".join(capsys.readouterr().err.split())
    assert f"method {method}: keys the config leaves out take its defaults" in note and "quickstart" not in note

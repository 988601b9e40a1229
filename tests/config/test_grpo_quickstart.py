"""`evotune grpo` without a config runs the method matrix's GRPO-on-a-LoRA arm at the learning rate its tuning chose,
and says so; a config that leaves the quickstart's keys out is told which defaults it gets instead."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from bench.method_matrix.arms import COMMON, LORA, METHODS
from bench.method_matrix.run import selection
from evotune.baselines.grpo import load_grpo_config
from evotune.cli.main import _note_quickstart, main
from evotune.config.grpo import GRPO_QUICKSTART, GRPORunConfig

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "method_matrix"


def test_the_quickstart_is_the_studys_grpo_lora_arm_at_its_chosen_learning_rate():
    arm = METHODS["grpo_lora"]
    chosen = selection(RESULTS, "grpo_lora")
    assert chosen is not None, "the GRPO-on-a-LoRA tuning runs have result files"
    study = {**COMMON, **arm["keys"], **arm["grid"][chosen]}
    for key, value in GRPO_QUICKSTART.items():
        if key in study and key not in ("iterations", "num_eval", "eval_every", "checkpoint_every"):  # run length
            assert value == study[key], key
    quickstart = GRPORunConfig.from_dict(GRPO_QUICKSTART)
    for key, value in LORA.items():  # the adapter's shape: the dataclass defaults are the study's
        assert getattr(quickstart, key) == value, key
    assert quickstart.dtype == COMMON["dtype"]


def test_print_config_without_a_config_shows_the_quickstart(tmp_path, capsys):
    assert main(["grpo", "--output-dir", str(tmp_path / "run"), "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert {key: printed[key] for key in GRPO_QUICKSTART} == GRPO_QUICKSTART


def test_no_config_says_it_runs_the_quickstart(capsys):
    args = argparse.Namespace(config=None, set=[])
    _note_quickstart(args, GRPORunConfig.from_dict(GRPO_QUICKSTART), GRPO_QUICKSTART, "grpo")
    note = " ".join(capsys.readouterr().err.split())
    assert "GRPO's quickstart" in note and "learning_rate 0.001" in note and "temperature 0.7" in note
    assert "all 64 completions at once; where memory is short, `--set gradient_accumulation_steps=4`" in note
    sliced = GRPORunConfig.from_dict({**GRPO_QUICKSTART, "gradient_accumulation_steps": 4})
    _note_quickstart(args, sliced, GRPO_QUICKSTART, "grpo")
    assert "gradient_accumulation_steps=4" not in capsys.readouterr().err  # already sliced: nothing to suggest


@pytest.mark.parametrize("given, named, unnamed", [
    ({"task": "arithmetic"}, ["learning_rate=1e-05 (quickstart: 0.001)", "temperature=1.0 (quickstart: 0.7)",
                              "iterations=20 (quickstart: 10)"], []),
    ({"learning_rate": 1e-3, "iterations": 3}, ["temperature=1.0 (quickstart: 0.7)"],
     ["learning_rate=", "iterations="]),
])
def test_a_config_is_told_the_defaults_it_gets_instead_of_the_quickstarts(tmp_path, capsys, given, named, unnamed):
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(given))
    args = argparse.Namespace(config=str(path), set=[])
    _note_quickstart(args, load_grpo_config(str(path), []), GRPO_QUICKSTART, "grpo")
    note = " ".join(capsys.readouterr().err.split())
    assert "evotune: note:" in note
    assert all(text in note for text in named) and not any(text in note for text in unnamed), note

"""Pickles are not loaded wherever a weight is read: a model directory whose weights are pickles only, and a PEFT
adapter whose .bin holds more than tensors, stop `train`, `eval` and `export` in one line (GRPO's resume over a
pickled optimizer state: tests/baselines/test_grpo_run_directory.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from evotune.cli.main import main
from evotune.errors import ConfigError
from evotune.files.adapters import adapter_weight_shapes

REFUSAL = "pickle files are not loaded (loading one can run the code it carries); convert to safetensors"


@pytest.fixture
def pickled_model(tiny_model_dir, tmp_path) -> Path:
    """The tiny model with its weights as pytorch_model.bin (a pickle) and no .safetensors."""
    model = tmp_path / "pickled"
    shutil.copytree(tiny_model_dir, model)
    torch.save(load_file(model / "model.safetensors"), model / "pytorch_model.bin")
    (model / "model.safetensors").unlink()
    return model


@pytest.mark.parametrize("command", [
    ["train", "--output-dir", "{tmp}/run", "--set", "model={model}", "--set", "iterations=1"],
    ["eval", "--model", "{model}", "--task", "arithmetic", "--num-eval", "2", "--output", "{tmp}/eval.json"],
    ["export", "{model}", "--output-dir", "{tmp}/exported"]])
def test_a_pickle_only_model_stops_each_command_in_one_line(pickled_model, tmp_path, capsys, command):
    argv = [part.format(tmp=tmp_path, model=pickled_model) for part in command]
    assert main(argv) == 2
    error = " ".join(capsys.readouterr().err.split())
    assert f"{pickled_model / 'pytorch_model.bin'}: {REFUSAL}" in error and "Traceback" not in error
    assert not (tmp_path / "run").exists() and not (tmp_path / "exported").exists()


class _Planted:
    pass


def test_an_adapter_bin_holding_more_than_tensors_is_refused(tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 2}')
    torch.save({"base_model.model.layers.0.self_attn.q_proj.lora_A.weight": _Planted()}, adapter / "adapter_model.bin")
    with pytest.raises(ConfigError, match="adapter_model.bin: pickle files are not loaded"):
        adapter_weight_shapes(adapter)

"""Damaged and mismatched PEFT adapters (issue 28, item 8), fault-injection style: each bad adapter directory
is refused by every command that loads one (train's adapter spaces, grpo's `adapter`, eval of an adapter)
with a ConfigError naming the file or module and the fix, before PEFT reads it (no raw traceback, no hub
download); an adapter recorded for another base with the same shapes loads with a warning naming both."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
from helpers import essa_config

from evotune.errors import ConfigError


def save_adapter(base_dir: str, directory: Path, hidden_size: int | None = None, **save_options) -> Path:
    """A fresh rank-4 LoRA of the tiny model (or of a copy `hidden_size` wide) saved to `directory`, its
    recorded base set to the tiny model so every loader uses that base."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from evotune.spaces.lora import init_lora_adapter

    config = AutoConfig.from_pretrained(base_dir)
    if hidden_size is not None:  # a base of another size: the same module names, other shapes
        config.hidden_size = hidden_size
    torch.manual_seed(0)
    model = init_lora_adapter(AutoModelForCausalLM.from_config(config), rank=4)
    model.save_pretrained(directory, **save_options)
    set_config(directory, base_model_name_or_path=base_dir)
    return directory


def set_config(directory: Path, **values) -> None:
    path = directory / "adapter_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **values}))


def load_for_train(base_dir: str, adapter: Path):
    """`evotune train` (and `eval` of an adapter run): the space build wraps the backend's model."""
    from evotune.backends import HFBackend
    from evotune.builders import build_space

    return build_space(essa_config(base_dir, adapter=str(adapter)), HFBackend.load(base_dir, dtype="float32"))


def load_for_grpo(base_dir: str, adapter: Path):
    """`evotune grpo --set adapter=DIR`: the policy TRL trains."""
    from evotune.baselines.grpo import GRPORunConfig, _policy

    return _policy(GRPORunConfig(model=base_dir, adapter=str(adapter)))


def load_for_eval(base_dir: str, adapter: Path):
    """`evotune eval DIR` of an adapter directory: its recorded base wrapped in it."""
    from evotune.backends.models import load_model

    return load_model(str(adapter))


LOADERS = [pytest.param(load_for_train, id="train"), pytest.param(load_for_grpo, id="grpo"),
           pytest.param(load_for_eval, id="eval")]


def not_json(directory: Path) -> str:
    (directory / "adapter_config.json").write_text('{"r": 4, "target_modules": [')
    return "adapter_config.json is not valid JSON"


def json_list(directory: Path) -> str:
    (directory / "adapter_config.json").write_text("[1, 2]")
    return "holds a JSON list"


def without_rank(directory: Path) -> str:
    values = json.loads((directory / "adapter_config.json").read_text())
    del values["r"]
    (directory / "adapter_config.json").write_text(json.dumps(values))
    return "lacks r"


def without_weights(directory: Path) -> str:
    # PEFT would look for the weights on the hub under the directory's name (a raw httpx ConnectError offline)
    (directory / "adapter_model.safetensors").unlink()
    return "no weights"


def garbage_header(directory: Path) -> str:
    path = directory / "adapter_model.safetensors"
    path.write_bytes(b"\xff" * 16 + path.read_bytes()[16:])
    return "adapter_model.safetensors cannot be read"


def truncated_weights(directory: Path) -> str:
    path = directory / "adapter_model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return "adapter_model.safetensors cannot be read"


def garbage_bin(directory: Path) -> str:
    (directory / "adapter_model.safetensors").unlink()
    (directory / "adapter_model.bin").write_bytes(b"not a torch file")
    return "adapter_model.bin cannot be read"


def wrong_target_modules(directory: Path) -> str:
    set_config(directory, target_modules=["q_proj", "qkv_fused"])
    return "qkv_fused match no module of the base model; its linear modules are .*q_proj"


def not_lora(directory: Path) -> str:
    set_config(directory, peft_type="PREFIX_TUNING")
    return "evotune loads LoRA adapters"


DAMAGES = [not_json, json_list, without_rank, without_weights, garbage_header, truncated_weights, garbage_bin,
           wrong_target_modules, not_lora]


@pytest.mark.parametrize("load", LOADERS)
@pytest.mark.parametrize("damage", DAMAGES, ids=lambda damage: damage.__name__)
def test_a_damaged_adapter_is_refused_by_name_before_peft_reads_it(tiny_model_dir, tmp_path, load, damage):
    adapter = save_adapter(tiny_model_dir, tmp_path / "adapter")
    expected = damage(adapter)
    files = {path.name: path.read_bytes() for path in adapter.iterdir()}
    with pytest.raises(ConfigError, match=expected) as error:
        load(tiny_model_dir, adapter)
    assert str(adapter) in str(error.value)  # the message names the directory the user passed
    assert {path.name: path.read_bytes() for path in adapter.iterdir()} == files  # the adapter is left as it was


@pytest.mark.parametrize("load", LOADERS)
def test_an_adapter_of_a_base_of_another_size_names_the_module_and_both_shapes(tiny_model_dir, tmp_path, load):
    adapter = save_adapter(tiny_model_dir, tmp_path / "wide", hidden_size=32)
    # the first mismatching module in name order, with the adapter's shape and the one the base needs
    with pytest.raises(ConfigError, match=r"model\.layers\.0\.self_attn\.k_proj\.lora_A has shape \(4, 32\), but "
                                          r"the base model's model\.layers\.0\.self_attn\.k_proj needs \(4, 16\)"):
        load(tiny_model_dir, adapter)


@pytest.mark.parametrize("load", LOADERS)
def test_an_adapter_recorded_for_another_base_with_the_same_shapes_warns_naming_both(tiny_model_dir, tmp_path, load):
    adapter = save_adapter(tiny_model_dir, tmp_path / "other")
    set_config(adapter, base_model_name_or_path="SomeOrg/Another-Model-1B")
    if load is load_for_eval:  # eval takes the base from the run's config.yaml when the adapter is a run's final/
        (tmp_path / "config.yaml").write_text(f"model: {tiny_model_dir}\n")
    with pytest.warns(UserWarning, match=f"trained on SomeOrg/Another-Model-1B, but the base model here is "
                                         f"{tiny_model_dir}"):
        load(tiny_model_dir, adapter)


@pytest.mark.parametrize("load", LOADERS)
def test_a_sound_adapter_loads_quietly_from_safetensors_and_from_a_bin_file(tiny_model_dir, tmp_path, load):
    for name, options in (("safetensors", {}), ("bin", {"safe_serialization": False})):
        adapter = save_adapter(tiny_model_dir, tmp_path / name, **options)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            load(tiny_model_dir, adapter)
        assert not [w for w in caught if "trained on" in str(w.message)]


def test_the_cli_prints_a_damaged_adapter_without_a_traceback(tiny_model_dir, tmp_path, capsys):
    from evotune.cli.main import main

    adapter = save_adapter(tiny_model_dir, tmp_path / "adapter")
    without_weights(adapter)
    code = main(["eval", "--model", str(adapter), "--task", "conciseness", "--num-eval", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "no weights" in err and "Traceback" not in err


@pytest.mark.parametrize("targets", [["all-linear"], ["q_proj", "nosuch_proj"]])
def test_fresh_adapter_target_modules_all_linear_or_named_by_what_is_missing(tiny_model_dir, targets):
    from transformers import AutoModelForCausalLM

    from evotune.spaces.lora import init_lora_adapter

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    if targets == ["all-linear"]:  # PEFT's meaning: every linear layer but the output head
        adapted = init_lora_adapter(model, rank=2, target_modules=targets).peft_config["default"].target_modules
        assert {name.rsplit(".", 1)[-1] for name in adapted} == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                              "up_proj", "down_proj"}
        return
    with pytest.raises(ConfigError, match="lora_target_modules: target module.s. nosuch_proj match no module"):
        init_lora_adapter(model, rank=2, target_modules=targets)


def test_an_adapter_recorded_with_the_loaded_models_own_path_loads_quietly_under_another_name(tiny_model_dir,
                                                                                              tmp_path):
    """The built-in model is named `smollm2-135m-instruct` in a config but loads from its package's directory, which
    is what an adapter trained on it records: the same base under two names is not another base."""
    from transformers import AutoModelForCausalLM

    from evotune.files.adapters import check_adapter

    adapter = save_adapter(tiny_model_dir, tmp_path / "adapter")  # records tiny_model_dir, the loaded path
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_adapter(adapter, model, "tiny-model-alias")
    assert not [w for w in caught if "trained on" in str(w.message)]
    set_config(adapter, base_model_name_or_path="SomeOrg/Another-Model-1B")  # another base still warns
    with pytest.warns(UserWarning, match="trained on SomeOrg/Another-Model-1B"):
        check_adapter(adapter, model, "tiny-model-alias")

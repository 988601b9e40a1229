"""ESSA through the trainer on a tiny model: adapter spaces with CMA-ES and OpenES, resume, export."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import essa_config, train_until_killed

from evotune.errors import ConfigError
from evotune.trainer import Trainer


def adapter_state(trainer: Trainer) -> dict[str, torch.Tensor]:
    return trainer.space.adapter_weights()


def base_state(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {name: param.detach().clone() for name, param in trainer.backend.model.named_parameters()
            if "lora_" not in name}


@pytest.mark.parametrize("space, strategy", [("svd_lora", "cma"), ("lora", "openes"), ("svd_lora", "openes")])
def test_one_step_changes_the_adapter_and_never_the_base(tiny_model_dir, tmp_path, space, strategy):
    extra = {"learning_rate": 0.5, "antithetic": True} if strategy == "openes" else {}
    trainer = Trainer(essa_config(tiny_model_dir, space=space, strategy=strategy, **extra), tmp_path / "run")
    adapter_before, base_before = adapter_state(trainer), base_state(trainer)
    record = trainer.step()
    assert record["reward_std"] > 0  # the candidates produced different completions
    adapter_after = adapter_state(trainer)
    assert any(not torch.equal(adapter_before[key], adapter_after[key]) for key in adapter_before)
    for name, tensor in base_state(trainer).items():
        assert torch.equal(tensor, base_before[name]), name


def test_final_is_a_peft_adapter_with_identical_generations(tiny_model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run = tmp_path / "run"
    trainer = Trainer(essa_config(tiny_model_dir), run)
    trainer.train()
    assert (run / "final" / "adapter_config.json").exists()
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    reloaded = PeftModel.from_pretrained(base, str(run / "final")).eval()
    inputs = trainer.backend.tokenizer(["What is 2 + 3?", "Name a color."], return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = trainer.backend.model(**inputs).logits
        assert torch.equal(reloaded(**inputs).logits, expected)


@pytest.mark.parametrize("offsets", ["absolute", "relative"])
def test_cma_resume_gives_the_same_final_adapter(tiny_model_dir, tmp_path, monkeypatch, offsets):
    options = {"svd_offsets": offsets}
    if offsets == "relative":  # scales singular values: needs an adapter whose B is not PEFT's zero
        Trainer(essa_config(tiny_model_dir, iterations=1), tmp_path / "start").train()
        options["adapter"] = str(tmp_path / "start" / "final")
    uninterrupted = Trainer(essa_config(tiny_model_dir, **options), tmp_path / "a")
    uninterrupted.train()
    expected = adapter_state(uninterrupted)

    killed = Trainer(essa_config(tiny_model_dir, **options), tmp_path / "b")
    train_until_killed(monkeypatch, killed, 4)  # during iteration 4, after the checkpoint at iteration 2
    resumed = Trainer(essa_config(tiny_model_dir, **options), tmp_path / "b", resume=True)
    assert resumed.strategy.iteration == 2
    resumed.train()
    for key, tensor in adapter_state(resumed).items():
        assert torch.equal(tensor, expected[key]), key
    assert resumed.strategy.mean.tolist() == uninterrupted.strategy.mean.tolist()


def test_training_starts_from_a_saved_adapter(tiny_model_dir, tmp_path):
    first = Trainer(essa_config(tiny_model_dir, iterations=2), tmp_path / "first")
    first.train()
    second = Trainer(essa_config(tiny_model_dir, adapter=str(tmp_path / "first" / "final")), tmp_path / "second")
    for key, tensor in adapter_state(second).items():  # zero offsets reproduce the loaded adapter
        torch.testing.assert_close(tensor, adapter_state(first)[key], rtol=0, atol=1e-6)


def test_eval_loads_a_run_directory_with_an_adapter(tiny_model_dir, tmp_path):
    from evotune.cli.main import main

    Trainer(essa_config(tiny_model_dir, iterations=1), tmp_path / "run").train()
    output = tmp_path / "eval.json"
    assert main(["eval", "--model", str(tmp_path / "run"), "--task", "conciseness", "--num-eval", "3",
                 "--max-new-tokens", "4", "--dtype", "float32", "--output", str(output)]) == 0
    assert json.loads(output.read_text())[0]["num_eval"] == 3


@pytest.mark.parametrize("overrides, message", [
    ({"space": "full", "strategy": "openes", "quantization": "int4"}, "updates the base weights"),
    ({"quantization": "int8", "int4_type": "fp4"}, "int4_type"),
    ({"singular_value_fraction": 0.2, "lora_rank": 4}, "rounds down to 0"),
    ({"singular_value_fraction": 1.5}, "(0, 1]"),
    ({"lora_init": "zeros"}, "lora_init"),
    ({"space": "full", "strategy": "openes", "population_batch_size": 4, "prefetch_candidates": True},
     "use one of the two"),
])
def test_adapter_config_errors_name_the_fix(tiny_model_dir, tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Trainer(essa_config(tiny_model_dir, **overrides), tmp_path / "run")


def test_missing_adapter_directory_is_a_clear_error(tiny_model_dir, tmp_path):
    with pytest.raises(ConfigError, match="adapter_config.json"):
        Trainer(essa_config(tiny_model_dir, adapter=str(tmp_path)), tmp_path / "run")

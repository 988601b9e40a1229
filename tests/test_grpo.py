"""`evotune grpo` (TRL's GRPOTrainer) on the tiny model: the run-directory contract, budgets, errors."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from evotune.cli.main import main
from evotune.errors import ConfigError

pytestmark = pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="needs trl: pip install 'evotune[grpo]'")


def test_grpo_run_writes_the_same_contract_as_train(tiny_model_dir, tmp_path, capsys):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run = tmp_path / "grpo"
    code = main(["grpo", "--output-dir", str(run), "--set", f"model={tiny_model_dir}", "--set", "task=conciseness",
                 "--set", "iterations=2", "--set", "batch_size=2", "--set", "num_generations=2",
                 "--set", "max_new_tokens=4", "--set", "num_eval=3", "--set", "eval_every=1",
                 "--set", "learning_rate=0.05", "--set", "report_to=[]"])
    assert code == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["iteration"] == 0 and "eval/reward" in records[0]
    steps = [r for r in records if "reward_mean" in r]
    assert [r["iteration"] for r in steps] == [1, 2]
    assert [r["samples_seen"] for r in steps] == [4, 8]  # 2 prompts x 2 completions per step
    assert all("eval/reward" in r and r["time_s"] > 0 and r["peak_rss_mib"] > 0 for r in steps)
    assert (run / "config.yaml").exists() and (run / "curves.png").exists()
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tuned = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), str(run / "final"))
    lora_b = [p for name, p in tuned.named_parameters() if "lora_B" in name]
    assert lora_b and any(p.abs().sum() > 0 for p in lora_b)  # B starts at zero: GRPO moved it
    assert sum(p.numel() for p in base.parameters()) > 0

    assert main(["compare", str(run), "--output", str(tmp_path / "cmp")]) == 0  # evotune's tools read it
    assert "grpo | 1 |" in capsys.readouterr().out


@pytest.mark.parametrize("override, message", [("num_generations=1", "at least 2"), ("loss_type=ppo", "loss_type"),
                                               ("learning_rte=1e-5", "did you mean `learning_rate`")])
def test_grpo_config_errors_name_the_fix(override, message, tmp_path, capsys):
    assert main(["grpo", "--output-dir", str(tmp_path / "x"), "--set", override]) == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_existing_run_is_not_overwritten(tiny_model_dir, tmp_path):
    from evotune.baselines.grpo import GRPORunConfig, run_grpo

    (tmp_path / "metrics.jsonl").write_text("")
    with pytest.raises(ConfigError, match="--resume"):
        run_grpo(GRPORunConfig(model=tiny_model_dir), str(tmp_path))
    assert torch.tensor(1.0).item() == 1.0

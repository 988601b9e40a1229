"""`evotune grpo` (TRL's GRPOTrainer) on the tiny model: the run-directory contract, budgets, errors."""

from __future__ import annotations

import json
import re

import pytest
import torch
from helpers import TINY_EVAL_BUDGET, requires_trl

from evotune.cli.main import main
from evotune.errors import ConfigError

pytestmark = requires_trl


def test_grpo_run_writes_the_same_contract_as_train(tiny_model_dir, tmp_path, capsys):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run = tmp_path / "grpo"
    code = main(["grpo", "--output-dir", str(run), "--set", f"model={tiny_model_dir}", "--set", "task=conciseness",
                 "--set", "iterations=2", "--set", "batch_size=2", "--set", "num_generations=2",
                 "--set", "max_new_tokens=4", "--set", "num_eval=3", "--set", "eval_every=1",
                 "--set", "learning_rate=0.05", "--set", "report_to=[]",
                 "--set", f"eval_max_new_tokens={TINY_EVAL_BUDGET}"])
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

    assert main(["compare", str(run), "--output-dir", str(tmp_path / "cmp")]) == 0  # evotune's tools read it
    assert "grpo-lora | 1 |" in capsys.readouterr().out


@pytest.mark.parametrize("override, message", [("num_generations=1", "at least 2"), ("loss_type=ppo", "loss_type"),
                                               ("learning_rte=1e-5", "did you mean `learning_rate`"),
                                               ("gradient_accumulation_steps=3", "must divide")])
def test_grpo_config_errors_name_the_fix(override, message, tmp_path, capsys):
    assert main(["grpo", "--output-dir", str(tmp_path / "x"), "--set", override]) == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_gradient_accumulation_gives_the_same_update_in_slices(tiny_model_dir, tmp_path):
    """4 completions a step as one batch or as 2 micro-batches of 2: the same samples, the same adapter."""
    from safetensors.torch import load_file

    adapters = {}
    for steps in (1, 2):
        run = tmp_path / f"accumulate{steps}"
        assert main(["grpo", "--output-dir", str(run), "--set", f"model={tiny_model_dir}", "--set", "task=conciseness",
                     "--set", "iterations=2", "--set", "batch_size=2", "--set", "num_generations=2",
                     "--set", "max_new_tokens=4", "--set", "num_eval=2", "--set", "eval_every=0",
                     "--set", "learning_rate=0.05", "--set", "report_to=[]",
                     "--set", f"gradient_accumulation_steps={steps}"]) == 0
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["samples_seen"] for r in records if "reward_mean" in r] == [4, 8]
        adapters[steps] = load_file(str(run / "final" / "adapter_model.safetensors"))
    assert adapters[1].keys() == adapters[2].keys()
    moved = [name for name in adapters[1] if "lora_B" in name and adapters[1][name].abs().sum() > 0]
    assert moved  # the update is not trivially zero
    for name in adapters[1]:
        torch.testing.assert_close(adapters[2][name], adapters[1][name], rtol=1e-4, atol=1e-6)


def test_existing_run_is_not_overwritten(tiny_model_dir, tmp_path):
    from evotune.baselines.grpo import GRPORunConfig, run_grpo

    (tmp_path / "metrics.jsonl").write_text("")
    with pytest.raises(ConfigError, match="--resume"):
        run_grpo(GRPORunConfig(model=tiny_model_dir), str(tmp_path))
    assert torch.tensor(1.0).item() == 1.0


def test_grpo_continues_a_saved_adapter_from_its_weights(tiny_model_dir, tmp_path):
    """`adapter: DIR`: GRPO starts from exactly that adapter (as ESSA does) and final/ is the same adapter moved on."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from evotune.baselines.grpo import GRPORunConfig, run_grpo
    from evotune.spaces.lora import init_lora_adapter

    start = tmp_path / "start"
    torch.manual_seed(0)
    model = init_lora_adapter(AutoModelForCausalLM.from_pretrained(tiny_model_dir), 4, ["q_proj", "v_proj"], 8.0,
                              "gaussian", 0)
    with torch.no_grad():  # a nonzero B, as after SFT
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.1)
    model.save_pretrained(str(start))
    saved = {name: param.detach().clone() for name, param in model.named_parameters() if "lora_" in name}

    seen_at_start = {}
    import trl

    real_train = trl.GRPOTrainer.train

    def train_and_record(self, *args, **kwargs):  # the policy's adapter as TRL starts training
        seen_at_start.update({name: p.detach().clone() for name, p in self.model.named_parameters() if "lora_" in name})
        return real_train(self, *args, **kwargs)

    trl.GRPOTrainer.train = train_and_record
    try:
        run_grpo(GRPORunConfig(model=tiny_model_dir, task="conciseness", iterations=2, batch_size=2,
                               num_generations=2, max_new_tokens=4, num_eval=2, eval_every=0, learning_rate=0.05,
                               report_to=[], lora_rank=16, adapter=str(start)), str(tmp_path / "grpo"))
    finally:
        trl.GRPOTrainer.train = real_train
    assert seen_at_start.keys() == saved.keys()
    for name, tensor in saved.items():  # the adapter's weights, not a fresh LoRA (its rank 4, not lora_rank 16)
        assert torch.equal(seen_at_start[name], tensor), name
    tuned = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                                      str(tmp_path / "grpo" / "final"))
    final = {name: p.detach() for name, p in tuned.named_parameters() if "lora_" in name}
    assert final.keys() == saved.keys()
    assert any(not torch.equal(final[name], saved[name]) for name in saved)  # GRPO moved it


def test_grpo_adapter_needs_lora(tiny_model_dir, tmp_path):
    from evotune.baselines.grpo import GRPORunConfig

    with pytest.raises(ConfigError, match="lora: true"):
        GRPORunConfig(model=tiny_model_dir, adapter=str(tmp_path), lora=False).validate()


@pytest.mark.parametrize("clock", ["wall", "cpu"])
def test_grpo_stops_at_its_time_budget_with_a_final_evaluation(tiny_model_dir, tmp_path, clock, capsys):
    """max_training_seconds, as for `evotune train`, on either clock: a tiny budget ends GRPO after its first step,
    evaluated; the step records its wall and CPU seconds. The progress bar ends at that step, not at 50."""
    from evotune.baselines.grpo import GRPORunConfig, run_grpo

    run = tmp_path / "grpo"
    run_grpo(GRPORunConfig(model=tiny_model_dir, task="conciseness", iterations=50, batch_size=2, num_generations=2,
                           max_new_tokens=4, num_eval=2, eval_every=0, learning_rate=0.05, report_to=[],
                           max_training_seconds=1e-6, training_clock=clock), str(run))
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "reward_mean" in r]
    assert [r["iteration"] for r in steps] == [1] and "eval/reward" in steps[0]
    assert steps[0]["cpu_s"] > 0 and steps[0]["time_s"] > 0
    assert (run / "final" / "adapter_config.json").exists()
    bars = re.findall(r"(\d+)/(\d+) \[", capsys.readouterr().err)
    assert ("0", "50") in bars and bars[-1] == ("1", "1")  # drawn over 50 steps, ended over the one taken


def prompt_order(model_dir: str, output, seed: int, data_seed: int | None) -> list[str]:
    """The prompts TRL's dataloader hands GRPO's first steps, in order (no training step runs)."""
    from evotune.baselines.grpo import GRPORunConfig, _build_trainer

    output.mkdir()
    config = GRPORunConfig(model=model_dir, task="conciseness", batch_size=2, num_generations=2, max_new_tokens=4,
                           num_eval=2, report_to=[], seed=seed, data_seed=data_seed)
    trainer, callback, _ = _build_trainer(config, output, None, max_steps=4, spent=0.0)
    callback.logger.close()
    return [str(row["prompt"]) for batch in trainer.get_train_dataloader() for row in batch]


def test_data_seed_orders_the_prompts_and_seed_does_not(tiny_model_dir, tmp_path):
    """TRL shuffles prompts with its `seed`; evotune hands that shuffle the data seed, so runs that differ only in
    `seed` (the noise) see the same prompts in the same order, and another data_seed another order."""
    orders = {name: prompt_order(tiny_model_dir, tmp_path / name, seed, data_seed)
              for name, seed, data_seed in (("base", 0, 5), ("other_noise", 1, 5), ("other_data", 0, 6))}
    assert len(orders["base"]) > 4  # the whole epoch, each prompt repeated num_generations times
    assert orders["other_noise"] == orders["base"]
    assert orders["other_data"] != orders["base"]
    # unset, data_seed is seed: the order TRL itself gives with that seed, as before data_seed existed
    assert prompt_order(tiny_model_dir, tmp_path / "unset", 5, None) == orders["base"]

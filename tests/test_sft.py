"""`evotune sft` (ESSA stage 1) on a tiny random Llama: masking, learning, frozen base, reload, CLI."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from helpers import CHECKPOINT_KILLER

from evotune.errors import ConfigError, DataError
from evotune.sft import IGNORE_INDEX, SFTConfig, collate, encode_example, load_sft_config, run_sft, sft_rows

QUESTION = [{"role": "user", "content": "What is 12 + 30? Reply with only the number."}]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def tiny_config(model_dir: str, **overrides) -> SFTConfig:
    # one batch of 4 seen at every step, so the loss must fall step after step
    values = dict(model=model_dir, task="arithmetic", num_train=4, num_eval=0, batch_size=4, max_steps=8,
                  learning_rate=5e-2, lora_rank=4, dtype="float32", device="cpu", report_to=[])
    return SFTConfig(**{**values, **overrides})


@pytest.fixture(scope="module")
def trained(tiny_model_dir, tmp_path_factory):
    """One tiny run: (backend whose model is now the trained PeftModel, run directory, base weights before)."""
    from evotune.backends import HFBackend

    backend = HFBackend.load(tiny_model_dir, dtype="float32", device="cpu")
    before = {name: tensor.clone() for name, tensor in backend.model.state_dict().items()}
    output_dir = tmp_path_factory.mktemp("sft") / "run"
    run_sft(tiny_config(tiny_model_dir), output_dir, backend=backend)
    return backend, output_dir, before


def test_loss_is_only_on_completion_tokens_and_eos(tokenizer):
    from evotune.backends.hf import render_prompt

    example = encode_example(tokenizer, QUESTION, "42")
    prompt_length = len(tokenizer(render_prompt(tokenizer, QUESTION), add_special_tokens=False)["input_ids"])
    labels, ids = example["labels"], example["input_ids"]
    assert labels[:prompt_length] == [IGNORE_INDEX] * prompt_length
    assert labels[prompt_length:] == ids[prompt_length:] and labels[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(labels[prompt_length:]) == "42" + tokenizer.eos_token
    # the training text is the chat template's own rendering of the finished conversation
    conversation = tokenizer.apply_chat_template(QUESTION + [{"role": "assistant", "content": "42"}], tokenize=False)
    assert conversation.startswith(tokenizer.decode(ids))
    batch = collate([example, encode_example(tokenizer, "Say hi.", "hi")], tokenizer.pad_token_id)
    padding = batch["attention_mask"] == 0
    assert padding.any() and (batch["labels"][padding] == IGNORE_INDEX).all()


def test_loss_decreases_and_only_the_adapter_changes(trained):
    backend, output_dir, before = trained
    losses = [r["loss"] for r in map(json.loads, (output_dir / "metrics.jsonl").read_text().splitlines())]
    # A 16-wide random model's logits span ~0.3 nats at most (weights of std 0.02), so the drop is small.
    assert len(losses) == 8 and all(later < earlier for earlier, later in zip(losses, losses[1:]))
    assert losses[-1] < losses[0] - 0.05
    base = backend.model.get_base_model()
    trained_names = [name for name, p in backend.model.named_parameters() if p.requires_grad]
    assert trained_names and all("lora_" in name for name in trained_names)
    after = {name.replace(".base_layer", ""): tensor for name, tensor in base.state_dict().items()
             if "lora_" not in name}
    assert after.keys() == before.keys()
    assert all(torch.equal(before[name], after[name]) for name in before)  # bit-identical base weights
    assert any(p.abs().sum() > 0 for name, p in base.named_parameters() if "lora_B" in name)  # B left zero


def test_adapter_reloads_in_peft_with_identical_logits(trained, tiny_model_dir, tokenizer):
    from peft import PeftModel

    from evotune.backends.models import load_model

    backend, output_dir, _ = trained
    ids = torch.tensor([encode_example(tokenizer, QUESTION, "42")["input_ids"]])
    with torch.no_grad():
        expected = backend.model(ids).logits
        reloaded = PeftModel.from_pretrained(load_model(tiny_model_dir, "float32")[0], str(output_dir / "adapter"))
        assert torch.equal(reloaded(ids).logits, expected)
        # evotune's own loader (the ES stage's `adapter:`) finds the base through DIR/config.yaml
        model, _ = load_model(str(output_dir / "adapter"), "float32")
        assert torch.equal(model(ids).logits, expected)
        assert not torch.equal(load_model(tiny_model_dir, "float32")[0](ids).logits, expected)


def test_dataset_in_trl_prompt_completion_format(tmp_path):
    path = tmp_path / "data.jsonl"
    rows = [{"prompt": QUESTION, "completion": [{"role": "assistant", "content": "42"}]},
            {"prompt": "2 + 2 =", "completion": " 4"}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    train, task = sft_rows(SFTConfig(dataset=str(path)))
    assert [row["completion"] for row in train] == ["42", " 4"] and task is None
    assert len(sft_rows(SFTConfig(dataset=str(path), num_train=1))[0]) == 1
    path.write_text(json.dumps({"prompt": "2 + 2 =", "answer": "4"}) + "\n")
    with pytest.raises(DataError, match="no `completion` column"):
        sft_rows(SFTConfig(dataset=str(path)))


def test_task_completions_come_from_solution_or_answer():
    assert sft_rows(SFTConfig(task="arithmetic", num_train=3, num_eval=2))[0][0]["completion"].isdigit()
    assert sft_rows(SFTConfig(task="conciseness", num_train=3))[0][0]["completion"]  # its `solution` column
    # countdown's `solution` is its solver's answer in the task's <think>/<answer> format (the format warm start)
    assert "<answer>" in sft_rows(SFTConfig(task="countdown", task_args={"num_train": 4},
                                            num_eval=2))[0][0]["completion"]
    with pytest.raises(ConfigError, match="no `solution` or `answer` to learn from"):
        sft_rows(SFTConfig(task="ifeval", num_eval=2))


@pytest.mark.parametrize("values, expected", [
    ({"task": "arithmetic", "learning_rat": 1e-3}, "unknown SFT key `learning_rat`; did you mean `learning_rate`?"),
    ({}, "set `task`"),
    ({"task": "custom"}, "`dataset`"),
    ({"task": "arithmetic", "lora_rank": 0}, "`lora_rank` must be >= 1"),
    ({"task": "arithmetic", "max_steps": 0}, "or null for no limit"),
    ({"task": "arithmetic", "learning_rate": "fast"}, "must be a number"),
])
def test_bad_config_names_the_key_and_the_fix(values, expected):
    with pytest.raises(ConfigError, match=expected.replace("`", ".").replace("?", ".")):
        SFTConfig.from_dict(values)


def test_cli_smoke_run_writes_the_run_directory(tiny_model_dir, tmp_path, capsys):
    from evotune.cli.main import main

    config = tmp_path / "sft.yaml"
    config.write_text(yaml.safe_dump(dict(model=tiny_model_dir, task="arithmetic", num_train=8, num_eval=2,
                                          max_new_tokens=4, batch_size=4, dtype="float32", device="cpu")))
    run = tmp_path / "run"
    assert main(["sft", str(config), "--output-dir", str(run), "--set", "max_steps=2",
                 "--set", "learning_rate=1e-3"]) == 0  # YAML reads 1e-3 as a string; it must become 0.001
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps"] == 2 and {"eval_before", "eval_after"} <= summary.keys()
    assert load_sft_config(run / "config.yaml").learning_rate == 1e-3
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 2] and "eval/accuracy" in records[0]
    assert {"step", "epoch", "loss", "learning_rate", "time_s"} <= records[1].keys()
    for name in ("loss.png", "adapter/adapter_config.json", "adapter/adapter_model.safetensors",
                 "adapter/tokenizer.json"):
        assert (run / name).exists(), name
    assert any((run / "tensorboard").iterdir())
    # a second run into the same directory, and a typo, are one-paragraph errors
    assert main(["sft", str(config), "--output-dir", str(run)]) == 2
    assert main(["sft", str(config), "--output-dir", str(tmp_path / "other"), "--set", "epoch=2"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "already holds an earlier run's adapter" in err and "--overwrite" in err
    assert "did you mean `epochs`?" in err and "Traceback" not in err
    # --overwrite replaces the earlier run's files (a file of the user's stays) and trains again
    (run / "adapter" / "stale.txt").write_text("from the first run")
    (run / "notes.txt").write_text("the user's")
    assert main(["sft", str(config), "--output-dir", str(run), "--overwrite", "--set", "max_steps=1"]) == 0
    assert json.loads(capsys.readouterr().out)["steps"] == 1
    assert not (run / "adapter" / "stale.txt").exists() and (run / "adapter" / "adapter_model.safetensors").exists()
    assert (run / "notes.txt").read_text() == "the user's"
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1, 1]


def resumable_config(tmp_path: Path, model_dir: str) -> Path:
    """sft.yaml of a 7-step run on the tiny model, checkpointed every 2 steps."""
    config = tmp_path / "sft.yaml"
    config.write_text(yaml.safe_dump(dict(model=model_dir, task="arithmetic", num_train=12, num_eval=2,
                                          max_new_tokens=4, batch_size=4, max_steps=7, learning_rate=5e-2,
                                          lora_rank=4, checkpoint_every=2, dtype="float32", device="cpu",
                                          report_to=[])))
    return config


def test_interrupted_run_resumes_to_the_same_adapter(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """`evotune sft --resume` after a stop at step 5 (checkpoint at 4) ends with the adapter, losses and metrics of
    the uninterrupted run, tensor for tensor; the refusals name their fix."""
    from safetensors.torch import load_file

    from evotune.cli.main import main
    from evotune.tracking.tracker import MetricsLogger

    config = resumable_config(tmp_path, tiny_model_dir)
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    assert main(["sft", str(config), "--output-dir", str(whole)]) == 0
    capsys.readouterr()

    log = MetricsLogger.log

    def stop_at_step_5(self, record):
        if record.get("step") == 5 and "loss" in record:
            raise KeyboardInterrupt
        log(self, record)

    monkeypatch.setattr(MetricsLogger, "log", stop_at_step_5)
    assert main(["sft", str(config), "--output-dir", str(stopped)]) == 130  # as Ctrl-C
    assert "evotune sft --output-dir" in capsys.readouterr().err and not (stopped / "adapter").exists()
    monkeypatch.setattr(MetricsLogger, "log", log)
    assert json.loads((stopped / "checkpoint" / "state.json").read_text())["iteration"] == 4

    # a new run into it, a changed key, and --resume with --overwrite are refused, naming what to do
    assert main(["sft", str(config), "--output-dir", str(stopped)]) == 2
    assert main(["sft", "--output-dir", str(stopped), "--resume", "--set", "learning_rate=0.1"]) == 2
    assert main(["sft", "--output-dir", str(stopped), "--resume", "--overwrite"]) == 2
    assert main(["sft", "--output-dir", str(tmp_path / "empty"), "--resume"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "pass --resume to continue it" in err and "`learning_rate` 0.05 -> 0.1" in err
    assert "pass only one of them" in err and "does not exist" in err and "Traceback" not in err

    assert main(["sft", "--output-dir", str(stopped), "--resume", "--set", "checkpoint_every=3"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["resumed_from_step"] == 4 and summary["steps"] == 7 and "accuracy" in summary["eval_before"]
    expected = load_file(str(whole / "adapter" / "adapter_model.safetensors"))
    resumed = load_file(str(stopped / "adapter" / "adapter_model.safetensors"))
    assert expected.keys() == resumed.keys() and all(torch.equal(expected[k], resumed[k]) for k in expected)
    records = [[json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
               for run in (whole, stopped)]
    assert [r["step"] for r in records[1]] == [0, 1, 2, 3, 4, 5, 6, 7, 7]  # steps 5-7 once, not twice
    assert [r.get("loss") for r in records[0]] == [r.get("loss") for r in records[1]]
    assert yaml.safe_load((stopped / "config.yaml").read_text())["checkpoint_every"] == 3


@pytest.mark.engine  # a process killed and resumed: the engine tier
def test_kill_9_mid_checkpoint_then_resume_gives_the_uninterrupted_adapter(tiny_model_dir, tmp_path, capsys):
    """`evotune sft` SIGKILLed in its own process between the two renames of its step-4 checkpoint save (the
    new checkpoint not yet in place), then `--resume`: the adapter, losses and logged steps of the uninterrupted
    run, each step logged once."""
    from safetensors.torch import load_file

    from evotune.cli.main import main

    config = resumable_config(tmp_path, tiny_model_dir)
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert main(["sft", str(config), "--output-dir", str(whole)]) == 0
    done = subprocess.run([sys.executable, "-c", CHECKPOINT_KILLER, "rename checkpoint.tmp -> checkpoint", "2", "sft",
                           str(config), "--output-dir", str(killed)], capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    assert not (killed / "adapter").exists()
    capsys.readouterr()
    assert main(["sft", "--output-dir", str(killed), "--resume"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["resumed_from_step"] == 2 and summary["steps"] == 7  # checkpoint.old: the save before
    expected = load_file(str(whole / "adapter" / "adapter_model.safetensors"))
    got = load_file(str(killed / "adapter" / "adapter_model.safetensors"))
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)
    records = [[json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
               for run in (whole, killed)]
    assert [r["step"] for r in records[1]] == [r["step"] for r in records[0]]  # no step twice, none lost
    assert [r.get("loss") for r in records[0]] == [r.get("loss") for r in records[1]]



@pytest.mark.slow
def test_example_config_raises_arithmetic_accuracy_on_the_real_model(tmp_path):
    example = Path(__file__).parents[1] / "examples" / "sft_arithmetic.yaml"
    # 64 held-out questions, not the example's 128: at its 48-token budget the two evaluations are most of the time
    summary = run_sft(load_sft_config(example, ["num_eval=64"]), tmp_path / "run")
    assert summary["eval_after"]["accuracy"] > summary["eval_before"]["accuracy"] + 0.15

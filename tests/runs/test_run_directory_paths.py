"""Relative paths in a run's config: config.yaml records them absolute, so the run resumes and evaluates from any
working directory (an ESSA run started from an `evotune sft` adapter named relatively, its final/ adapter's base)."""

from __future__ import annotations

import json
import shutil

import yaml
from helpers import essa_config

from evotune.cli.main import main
from evotune.config import TrainConfig
from evotune.sft import SFTConfig, run_sft
from evotune.trainer import Trainer


def test_an_essa_run_from_a_relative_adapter_resumes_and_evaluates_from_elsewhere(tiny_model_dir, tmp_path,
                                                                                   monkeypatch):
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir(), elsewhere.mkdir()
    shutil.copytree(tiny_model_dir, work / "model")
    monkeypatch.chdir(work)
    run_sft(SFTConfig(model="model", task="arithmetic", num_train=4, num_eval=0, batch_size=4, max_steps=2,
                      lora_rank=4, dtype="float32", device="cpu", report_to=[]), "sft")
    assert yaml.safe_load((work / "sft" / "config.yaml").read_text())["model"] == str(work / "model")
    config = essa_config("model", adapter="sft/adapter", iterations=2, checkpoint_every=1)
    Trainer(config, "run").train()
    recorded = yaml.safe_load((work / "run" / "config.yaml").read_text())
    assert recorded["adapter"] == str(work / "sft" / "adapter") and recorded["model"] == str(work / "model")
    base = json.loads((work / "run" / "final" / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert base == str(work / "model")  # the adapter finds its base from anywhere

    monkeypatch.chdir(elsewhere)  # the same run, from another directory: resume, then evaluate
    resumed = TrainConfig.from_dict({**recorded, "iterations": 3})
    Trainer(resumed, work / "run", resume=True).train()
    assert main(["eval", "--model", str(work / "run"), "--task", "conciseness", "--num-eval", "2",
                 "--max-new-tokens", "4", "--dtype", "float32", "--output", "eval.json"]) == 0
    assert json.loads((elsewhere / "eval.json").read_text())[0]["num_eval"] == 2


def test_a_relative_dataset_is_recorded_absolute_and_a_resume_naming_it_relatively_is_the_same_run(
        tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rows = [{"prompt": f"Say {n}.", "solution": str(n)} for n in range(12)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = dict(model=tiny_model_dir, task="custom", dataset="data.jsonl", num_eval=4, population_size=4,
                  reward_fns=["evotune.tasks:conciseness_reward"], iterations=2, checkpoint_every=1, batch_size=2,
                  max_new_tokens=4, dtype="float32", report_to=[])
    Trainer(TrainConfig(**config), "run").train()
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["dataset"] == str(tmp_path / "data.jsonl")
    # the user repeats the relative path on --resume: the same file, so not a change of the run
    Trainer(TrainConfig(**{**config, "iterations": 3}), "run", resume=True).train()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [record["iteration"] for record in records][-1] == 3


def test_hub_ids_and_aliases_are_left_as_written(tmp_path, monkeypatch):
    from evotune.config.files import absolutize_paths

    monkeypatch.chdir(tmp_path)
    config = TrainConfig(model="smollm2-135m-instruct", task="gsm8k", dataset="openai/gsm8k")
    absolutize_paths(config)
    assert (config.model, config.dataset) == ("smollm2-135m-instruct", "openai/gsm8k")

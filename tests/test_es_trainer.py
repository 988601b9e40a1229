"""ESTrainer: TRL's GRPOTrainer shape (model, reward_funcs, args, datasets, peft_config) on evotune's loop."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import yaml
from helpers import TINY_EVAL_BUDGET, read_by_parts, requires_trl

from evotune.cli.main import main
from evotune.errors import ConfigError
from evotune.es_trainer import ESConfig, ESTrainer

PROMPTS = ["Say hi.", "Name a color.", "Count to two.", "Pick a fruit.", "Say bye.", "Name a pet."]


def short_reward(prompts, completions, **columns):
    """TRL's signature; conversational completions are message lists. Rewards short answers."""
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    return [-float(len(text)) + float(bonus) for text, bonus in zip(texts, columns["bonus"])]


def conversational_dataset():
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [[{"role": "user", "content": p}] for p in PROMPTS],
                              "bonus": [float(i) for i in range(len(PROMPTS))]})


def es_args(tmp_path, **overrides) -> ESConfig:
    values = dict(output_dir=str(tmp_path / "es"), population_size=4, antithetic=True, sigma=0.05,
                  learning_rate=0.05, iterations=2, batch_size=2, max_new_tokens=4, num_eval=2, eval_every=1,
                  dtype="float32", report_to=[], eval_max_new_tokens=TINY_EVAL_BUDGET)
    return ESConfig(**read_by_parts(values, overrides, ESConfig))


@requires_trl
def test_grpo_trainer_script_and_its_es_twin_run_on_the_same_objects(tiny_model_dir, tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    dataset = conversational_dataset()
    grpo = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short_reward], train_dataset=dataset,
                       args=GRPOConfig(output_dir=str(tmp_path / "grpo"), max_steps=1, per_device_train_batch_size=2,
                                       num_generations=2, max_completion_length=4, report_to="none", use_cpu=True,
                                       save_strategy="no", logging_steps=1))
    grpo.train()
    assert grpo.state.global_step == 1

    es = ESTrainer(model=tiny_model_dir, reward_funcs=[short_reward], train_dataset=dataset,
                   args=es_args(tmp_path))
    from transformers import AutoModelForCausalLM

    before = dict(AutoModelForCausalLM.from_pretrained(tiny_model_dir).named_parameters())
    final = es.train()
    run = tmp_path / "es"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1, 2] and "eval/reward" in final
    resolved = yaml.safe_load((run / "config.yaml").read_text())
    assert resolved["task"] == "custom" and resolved["reward_fns"] == ["test_es_trainer:short_reward"]
    assert [json.loads(line)["bonus"] for line in (run / "data" / "train.jsonl").read_text().splitlines()] == \
        [float(i) for i in range(len(PROMPTS))]
    tuned = dict(AutoModelForCausalLM.from_pretrained(run / "final").named_parameters())
    assert any(not torch.equal(tuned[name], value) for name, value in before.items())


def test_a_loaded_model_with_its_tokenizer_and_mixed_reward_funcs(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    seen = []

    def counting_reward(prompts, completions, **columns):
        seen.append(len(prompts))
        return [1.0] * len(prompts)

    trainer = ESTrainer(model=model, processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
                        reward_funcs=[counting_reward, "test_es_trainer:short_reward"],
                        args=es_args(tmp_path, reward_weights=[0.5, 1.0], iterations=1),
                        train_dataset=[{"prompt": p, "bonus": 0.0} for p in PROMPTS])
    baseline = trainer.evaluate()
    assert set(baseline) >= {"eval/reward"} and seen  # evaluate() before train(): the starting model
    trainer.train()
    assert trainer.trainer.backend.model is model  # the given object was trained, not a reloaded copy
    trainer.save_model(str(tmp_path / "saved"))
    assert (tmp_path / "saved" / "config.json").exists()


def test_peft_config_evolves_the_adapter_singular_values(tiny_model_dir, tmp_path):
    from peft import LoraConfig

    trainer = ESTrainer(model=tiny_model_dir, reward_funcs=short_reward, train_dataset=conversational_dataset(),
                        args=es_args(tmp_path, space="svd_lora", strategy="cma", antithetic=False, iterations=1),
                        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    trainer.train()
    adapter = json.loads((tmp_path / "es" / "final" / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and sorted(adapter["target_modules"]) == ["q_proj", "v_proj"]
    with pytest.raises(ConfigError, match="space='svd_lora'"):
        ESTrainer(model=tiny_model_dir, reward_funcs=short_reward, train_dataset=conversational_dataset(),
                  args=es_args(tmp_path / "x"), peft_config=LoraConfig(r=4))


def test_resume_continues_the_run_and_refuses_other_data(tiny_model_dir, tmp_path):
    dataset = conversational_dataset()
    ESTrainer(model=tiny_model_dir, reward_funcs=short_reward, train_dataset=dataset,
              args=es_args(tmp_path, iterations=1)).train()
    longer = ESTrainer(model=tiny_model_dir, reward_funcs=short_reward, train_dataset=dataset,
                       args=es_args(tmp_path, iterations=2))
    longer.train(resume_from_checkpoint=True)
    assert longer.trainer.strategy.iteration == 2
    other = ESTrainer(model=tiny_model_dir, reward_funcs=short_reward, train_dataset=dataset.select(range(4)),
                      args=es_args(tmp_path, iterations=3))
    with pytest.raises(ConfigError, match="differs"):
        other.train(resume_from_checkpoint=True)
    # the run directory is the CLI's: `evotune train --resume` continues it from its own config and data
    assert main(["train", "--output-dir", str(tmp_path / "es"), "--resume", "--set", "iterations=3"]) == 0
    last = json.loads((tmp_path / "es" / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["iteration"] == 3


@pytest.mark.parametrize("data_seed", [None, 7])
def test_the_datasets_task_equals_the_one_the_cli_builds_from_the_written_files(tiny_model_dir, tmp_path,
                                                                               data_seed):
    """ESTrainer's task over in-memory rows and build_task over the data/ files it writes (what `evotune train
    --resume` reads) hold the same split, rewards and weights: one code path, seeded by data_seed (else seed)."""
    from evotune.builders import build_task

    trainer = ESTrainer(model=tiny_model_dir, reward_funcs=[short_reward, short_reward],
                        train_dataset=conversational_dataset(),
                        args=es_args(tmp_path, data_seed=data_seed, reward_weights=[2.0, 1.0]))
    trainer._write_data()
    from_files = build_task(trainer.config)  # task custom, dataset = the written data/train.jsonl
    for task in (trainer.task, from_files):
        assert task.name == "custom" and task.reward_fns == [short_reward, short_reward]
        assert task.reward_weights == [2.0, 1.0]
    assert (trainer.task.train_rows, trainer.task.eval_rows) == (from_files.train_rows, from_files.eval_rows)
    other_seed = build_task(dataclasses.replace(trainer.config, data_seed=(data_seed or 0) + 1))
    assert other_seed.eval_rows != from_files.eval_rows  # the split does follow the seed


def test_a_dataset_without_reward_funcs_or_given_as_a_path_is_refused(tiny_model_dir, tmp_path):
    with pytest.raises(ConfigError, match="needs reward_funcs"):
        ESTrainer(model=tiny_model_dir, train_dataset=conversational_dataset(), args=es_args(tmp_path))
    with pytest.raises(ConfigError, match="dataset objects"):
        ESTrainer(model=tiny_model_dir, reward_funcs=short_reward, train_dataset="data.jsonl", args=es_args(tmp_path))


def test_a_built_in_task_scored_by_reward_funcs_that_are_not_importable(tiny_model_dir, tmp_path):
    def local_reward(prompts, completions, **columns):  # a closure: no import path reaches it
        return [float(len(prompts))] * len(prompts)

    trainer = ESTrainer(model=tiny_model_dir, reward_funcs=[local_reward, short_reward],
                        args=es_args(tmp_path, task="countdown", reward_weights=[2.0, 1.0]))
    assert trainer.task.name == "countdown" and trainer.task.reward_fns == [local_reward, short_reward]
    assert trainer.task.reward_weights == [2.0, 1.0]
    with pytest.raises(ConfigError, match="reward_weights"):
        ESTrainer(model=tiny_model_dir, reward_funcs=[local_reward],
                  args=es_args(tmp_path / "bad", task="countdown", reward_weights=[2.0, 1.0]))


def test_evaluate_before_train_scores_the_retention_tasks_as_the_run_logs_them(tiny_model_dir, tmp_path,
                                                                              monkeypatch):
    import evotune.evaluation.retention

    builds = []
    build_retention = evotune.evaluation.retention.build_retention
    monkeypatch.setattr(evotune.evaluation.retention, "build_retention", lambda *args: builds.append(args) or
                        build_retention(*args))
    retention = dict(retention_tasks=["countdown"], retention_num_eval=3, iterations=1)
    starting = ESTrainer(model=tiny_model_dir, reward_funcs=short_reward, train_dataset=conversational_dataset(),
                         args=es_args(tmp_path / "before", **retention))
    before = starting.evaluate()
    assert starting.evaluate() == before and len(builds) == 1  # the retention (a copy of the base) built once
    trainer = ESTrainer(model=tiny_model_dir, reward_funcs=short_reward, train_dataset=conversational_dataset(),
                        args=es_args(tmp_path / "run", **retention))
    trainer.train()
    logged = json.loads((tmp_path / "run" / "es" / "metrics.jsonl").read_text().splitlines()[0])  # iteration 0
    keys = [key for key in logged if key.startswith(("eval/", "retain/"))]
    assert "retain/countdown/reward" in keys and before["retain/countdown/kl"] == 0  # the base itself
    assert {key: before[key] for key in keys} == {key: logged[key] for key in keys}


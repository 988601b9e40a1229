"""evotune.evaluation.model_card: final/README.md as a Hugging Face model card: the Hub's front matter, the method with
its paper, the task and rewards, the hyperparameters, held-out metrics before and after, and how to reproduce."""

from __future__ import annotations

from helpers import front_matter, write_metrics

from evotune.config import TrainConfig
from evotune.evaluation.model_card import base_model_info, eval_before_after, model_card, write_model_card


def test_model_card_for_an_essa_adapter_on_the_built_in_model(tmp_path):
    config = TrainConfig(model="smollm2-135m-instruct", task="gsm8k", dataset="openai/gsm8k", space="svd_lora",
                         strategy="cma", singular_value_fraction=0.5, population_size=8, iterations=3)
    records = [{"iteration": 0, "eval/accuracy": 0.25, "eval/reward": 0.25},
               {"iteration": 1, "reward_mean": 0.1, "reward_max": 0.2, "time_s": 30.0, "samples_seen": 256},
               {"iteration": 3, "reward_mean": 0.2, "reward_max": 0.4, "time_s": 30.0, "eval/accuracy": 0.5,
                "eval/reward": 0.5}]
    card = model_card(config, records, tmp_path / "essa_run")
    meta = front_matter(card)
    assert meta["base_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct" and meta["license"] == "apache-2.0"
    assert meta["library_name"] == "peft" and meta["base_model_relation"] == "adapter"
    assert {"essa", "lora", "gsm8k"} <= set(meta["tags"]) and meta["datasets"] == ["openai/gsm8k"]
    assert "arxiv.org/abs/2507.04453" in card and "CMA-ES" in card and "| `singular_value_fraction` | 0.5 |" in card
    assert "| accuracy | 0.25 | 0.5 | +0.25 |" in card and "after (iteration 3)" in card
    assert "PeftModel.from_pretrained(base, path)" in card


def test_full_parameter_es_on_a_local_model_reads_its_license_and_loads_without_peft(tiny_model_dir, tmp_path):
    import shutil

    model = tmp_path / "my-model"
    shutil.copytree(tiny_model_dir, model)
    (model / "README.md").write_text("---\nlicense: mit\ntags: [x]\n---\n# my model\n")
    config = TrainConfig(model=str(model), task="conciseness", population_size=4, iterations=2)
    card = model_card(config, [], tmp_path / "run")
    meta = front_matter(card)
    assert meta == {"library_name": "transformers", "license": "mit", "pipeline_tag": "text-generation",
                    "tags": ["evotune", "evolution-strategies", "es-at-scale", "conciseness"]}  # no Hub base model
    assert f"A fine-tuned `{model}`" in card and "# run: my-model + ES at Scale on `conciseness`" in card
    assert "arxiv.org/abs/2509.24372" in card and "OpenAI-style ES (OpenES)" in card
    assert "model = AutoModelForCausalLM.from_pretrained(path)" in card and "PeftModel" not in card
    assert "No held-out evaluation was recorded in metrics.jsonl." in card
    assert "| `population_size` | 4 |" in card and "`parameters`" not in card  # unset options left out


def test_base_model_info_without_the_network():
    assert base_model_info("smollm2")["id"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert base_model_info("Qwen/Qwen2.5-0.5B-Instruct")["id"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert base_model_info("Qwen/Qwen2.5-0.5B-Instruct")["note"] is None
    for not_a_hub_id in ("models/model.gguf", "model.gguf", "./relative/dir/x"):
        info = base_model_info(not_a_hub_id)
        assert info["id"] is None and info["license"] is None and not_a_hub_id in info["note"]


def test_lowrank_card_cites_eggroll_and_es_at_scale_and_weighs_the_rewards(tmp_path):
    config = TrainConfig(model="smollm2", task="conciseness", space="lowrank", perturbation_rank=2,
                         reward_fns=["evotune.tasks:conciseness_reward", "mymodule:length"], reward_weights=[0.5, 2.0])
    records = [{"iteration": 1, "reward_mean": 0.1, "time_s": 60.0, "samples_seen": 30, "peak_rss_mib": 2048.0},
               {"iteration": 2, "reward_mean": 0.2, "time_s": 30.0, "samples_seen": 60, "peak_rss_mib": 1024.0}]
    card = model_card(config, records, tmp_path / "run")
    assert front_matter(card)["base_model_relation"] == "finetune" and "eggroll" in front_matter(card)["tags"]
    assert "rank-2 noise" in card and "| `perturbation_rank` | 2 |" in card
    assert "- Reward: 0.5 × `evotune.tasks:conciseness_reward` + 2 × `mymodule:length`." in card
    assert "| iterations run | 2 |" in card and "| completions sampled for training | 60 |" in card
    assert "| training time | 1.5 min |" in card and "| peak memory | 2.00 GiB |" in card
    citations = card[card.index("## Citation"):]
    assert "arxiv.org/abs/2511.16652" in citations and "arxiv.org/abs/2509.24372" in citations


def test_before_and_after_are_iteration_0_and_the_last_evaluation():
    records = [{"iteration": 0, "eval/accuracy": 0.25, "eval/reward": None},
               {"iteration": 1, "reward_mean": 0.1},
               {"iteration": 2, "eval/accuracy": 0.5},
               {"iteration": 3, "reward_mean": 0.2, "eval/accuracy": 0.75, "eval/reward": 1.0}]
    before, after = eval_before_after(records)
    assert before is records[0] and after is records[3]
    assert eval_before_after(records[:2]) == (records[0], None)  # only the base model was evaluated
    assert eval_before_after(records[1:3]) == (None, records[2])  # a run that skipped iteration 0
    assert eval_before_after([{"iteration": 1, "reward_mean": 0.1}]) == (None, None)


def test_write_model_card_reads_metrics_jsonl_and_replaces_the_template_card(tmp_path):
    run = tmp_path / "run"
    (run / "final").mkdir(parents=True)
    (run / "final" / "README.md").write_text("PEFT's placeholder card")
    write_metrics(run / "metrics.jsonl", [{"iteration": 0, "eval/reward": -3.0}, {"iteration": 4, "eval/reward": None},
                                          {"iteration": 5, "eval/reward": -1.5}])
    config = TrainConfig(model="smollm2", task="conciseness", iterations=5)
    path = write_model_card(run, config)
    card = path.read_text(encoding="utf-8")
    assert path == run / "final" / "README.md" and "placeholder" not in card
    assert "| reward | -3 | -1.5 | +1.5 |" in card and "after (iteration 5)" in card
    assert f"evotune train {run}/config.yaml --output-dir NEW_DIR" in card
    fresh = tmp_path / "fresh"  # no metrics.jsonl yet, no final/ yet
    assert "No held-out evaluation" in write_model_card(fresh, config).read_text(encoding="utf-8")

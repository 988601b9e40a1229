"""IFEval through lm-eval's checkers, a sequence-classification reward model, and TRL's own rewards."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import requires_lm_eval, requires_trl

from evotune.errors import ConfigError, DataError
from evotune.tasks import RewardModelScorer, get_task


def ifeval_file(tmp_path, rows):
    path = tmp_path / "ifeval.jsonl"
    path.write_text("".join(json.dumps({"key": i, **row}) + "\n" for i, row in enumerate(rows)))
    return str(path)


ROWS = [
    {"prompt": "Say hi. Do not include any commas in your response.",
     "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]},
    {"prompt": "Describe rain in lowercase, with a P.S. at the end.",
     "instruction_id_list": ["change_case:english_lowercase", "detectable_content:postscript"],
     "kwargs": [{}, {"postscript_marker": "P.S."}]},
    {"prompt": "Wrap your answer in double quotes.", "instruction_id_list": ["startend:quotation"], "kwargs": [{}]},
]


@requires_lm_eval
def test_ifeval_metrics_on_hand_written_responses(tmp_path):
    task = get_task("ifeval", dataset=ifeval_file(tmp_path, ROWS), eval_dataset=ifeval_file(tmp_path, ROWS))
    rows = task.eval_rows
    responses = ["hi there friend",                         # no comma: followed
                 "rain falls softly\nP.S. i like rain",      # P.S. followed; "P.S." is not lowercase (strict)
                 "*\"quoted answer\"*"]                      # strict fails (asterisks); loose strips them
    metrics = task.evaluate(rows, responses)
    assert metrics["prompt_strict"] == pytest.approx(1 / 3)
    assert metrics["prompt_loose"] == pytest.approx(1.0)  # loose also tries without the first / last line
    assert metrics["instruction_strict"] == pytest.approx(2 / 4)  # weighted by instructions: 2 of 4
    assert metrics["instruction_loose"] == pytest.approx(1.0)

    half = task.evaluate(rows, ["hi, there", "Rain falls\nP.S. I like rain", "no quotes"])
    # prompt 2 follows 1 of its 2 instructions: instruction-level 1/4 (not the mean of per-prompt fractions)
    assert half["prompt_strict"] == 0.0 and half["instruction_strict"] == pytest.approx(1 / 4)
    assert list(task.rewards(rows, ["hi, there", "Rain falls\nP.S. I like rain", "no quotes"])) == [0.0, 0.5, 0.0]


@requires_lm_eval
def test_ifeval_scores_an_unclear_language_the_same_every_time(tmp_path):
    """langdetect guesses at random unless seeded: unseeded, this text is Somali or Italian from call to call."""
    rows = [{"prompt": "Answer in Italian.", "instruction_id_list": ["language:response_language"],
             "kwargs": [{"language": "it"}]}]
    task = get_task("ifeval", dataset=ifeval_file(tmp_path, rows), eval_dataset=ifeval_file(tmp_path, rows))
    assert len({float(task.rewards(task.eval_rows, ["sto meg xx ab"])[0]) for _ in range(30)}) == 1


@requires_lm_eval
def test_ifeval_counts_sentences_offline_with_the_shipped_punkt_tables(monkeypatch):
    """nltk would download punkt_tab (no network here); evotune ships it, so the built-in sentence-count prompt and
    the capital-word count are scored, not skipped, and counted as nltk's English Punkt model counts."""
    import nltk

    from evotune.tasks import ifeval

    monkeypatch.setattr(nltk.data, "path", [])  # no nltk data but what evotune ships
    ifeval.add_shipped_nltk_data()
    found = nltk.data.find("tokenizers/punkt_tab/english/")
    assert str(found) == str(ifeval.NLTK_DATA / "tokenizers" / "punkt_tab" / "english")

    task = get_task("ifeval")
    [row] = [row for row in task.train_rows if row["instruction_id_list"] == ["length_constraints:number_sentences"]]
    assert row["kwargs"] == [{"num_sentences": 4, "relation": "at least"}]
    # "Mr." and "p.m." are abbreviations in the English model: 4 sentences, not 6
    four = "Arrive early. Greet Mr. Smith by name. Ask about the team at 3 p.m. on Monday. Thank them!"
    three = "Arrive early. Greet Mr. Smith by name. Ask about the team at 3 p.m. on Monday."
    assert list(task.rewards([row, row], [four, three])) == [1.0, 0.0]
    metrics = task.evaluate([row, row], [four, three])
    assert "skipped" not in metrics and metrics["prompt_strict"] == metrics["prompt_loose"] == 0.5
    capitals = {"prompt": "Shout.", "instruction_id_list": ["change_case:capital_word_frequency"],
                "kwargs": [{"capital_frequency": 2, "capital_relation": "at least"}]}
    [capitals] = ifeval._validate([capitals], "test")
    assert list(task.rewards([capitals, capitals], ["STOP and GO now", "Stop and GO now"])) == [1.0, 0.0]


@requires_lm_eval
def test_builtin_ifeval_set_loads_and_every_instruction_is_known():
    task = get_task("ifeval", num_eval=10)
    assert len(task.train_rows) == 24 and len(task.eval_rows) == 10
    assert all(row["prompt"][0]["role"] == "user" for row in task.eval_rows)


@requires_lm_eval
def test_ifeval_bad_rows_name_row_and_column(tmp_path):
    with pytest.raises(DataError, match="row 1.*instruction_id_list.*made:up"):
        get_task("ifeval", dataset=ifeval_file(tmp_path, [{"prompt": "x", "instruction_id_list": ["made:up"],
                                                           "kwargs": [{}]}]))
    with pytest.raises(DataError, match="row 1: no `kwargs`"):
        get_task("ifeval", dataset=ifeval_file(tmp_path, [{"prompt": "x", "instruction_id_list": []}]))


@pytest.fixture(scope="module")
def reward_model_dir(tmp_path_factory, tiny_model_dir):
    """A tiny random Llama sequence classifier (one label) with the tiny model's tokenizer."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, num_labels=1,
                         pad_token_id=tokenizer.eos_token_id)
    torch.manual_seed(1)
    directory = tmp_path_factory.mktemp("reward-model")
    LlamaForSequenceClassification(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


def test_reward_model_scores_match_a_direct_forward_and_batching(reward_model_dir):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    prompts = ["What is 2 + 2?", [{"role": "user", "content": "Name a colour."}], "Tell me a joke."]
    completions = ["4", "Blue, like the sky on a clear day.", "No."]
    scores = RewardModelScorer(reward_model_dir, batch_size=2)(prompts=prompts, completions=completions)
    one_by_one = RewardModelScorer(reward_model_dir, batch_size=1)(prompts=prompts, completions=completions)
    assert scores == pytest.approx(one_by_one, abs=1e-5)  # padding does not change a score
    assert len(set(round(s, 6) for s in scores)) == 3

    tokenizer = AutoTokenizer.from_pretrained(reward_model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(reward_model_dir).eval()
    text = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2 + 2?"},
                                          {"role": "assistant", "content": "4"}], tokenize=False)
    with torch.no_grad():
        direct = model(**tokenizer(text, return_tensors="pt", add_special_tokens=False)).logits[0, 0].item()
    assert scores[0] == pytest.approx(direct, abs=1e-5)


def test_reward_model_task_and_its_errors(reward_model_dir, tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Question {i}?"}) + "\n" for i in range(10)))
    task = get_task("reward_model", dataset=str(data), num_eval=3, reward_model=reward_model_dir)
    assert len(task.eval_rows) == 3 and len(task.train_rows) == 7
    rewards = task.rewards(task.eval_rows, ["a", "b", "c"])
    assert rewards.shape == (3,) and torch.isfinite(torch.tensor(rewards)).all()
    with pytest.raises(ConfigError, match="reward_model: PATH_OR_HUB_ID"):
        get_task("reward_model", dataset=str(data))
    missing = get_task("reward_model", dataset=str(data), num_eval=3, reward_model=str(tmp_path / "nope"))
    with pytest.raises(Exception, match="could not be loaded"):
        missing.rewards(missing.eval_rows, ["a", "b", "c"])


@requires_trl
def test_trl_reward_functions_work_unchanged(tmp_path):
    """TRL's own reward functions plug in by import path, with weights, on a conversational dataset
    (their convention: chat prompts get [{"role": "assistant", "content": ...}] completions)."""
    data = tmp_path / "d.jsonl"
    rows = [{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}], "solution": f"${2 * i}$"}
            for i in range(4)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    task = get_task("custom", dataset=str(data), num_eval=1,
                    reward_fns=["trl.rewards:think_format_reward", "trl.rewards:accuracy_reward"],
                    reward_weights=[0.5, 1.0])
    train = task.train_rows[:2]
    answers = [f"<think>\nadd\n</think>\n\\boxed{{{2 * int(r['prompt'][0]['content'].split()[2])}}}" for r in train]
    assert list(task.rewards(train, answers)) == [1.5, 1.5]  # format 0.5 + correct 1.0
    assert list(task.rewards(train, ["no tags, \\boxed{999}", "no tags"])) == [0.0, 0.0]

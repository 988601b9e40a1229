"""ESTrainer's inputs (issue 28, item 7), fault-injection style: each bad argument is refused with an error that
names it and the fix, before anything is written to output_dir; a start that fails later leaves nothing that
blocks the next attempt; `overwrite` replaces a run (as `evotune train --overwrite`) and nothing else is lost;
rewards too large for fitness shaping stop the run by candidate instead of training on zeros."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import read_by_parts

from evotune.callbacks import ESCallback
from evotune.config import TrainConfig
from evotune.errors import ConfigError, DataError, RewardFunctionError
from evotune.es_trainer import ESConfig, ESTrainer

PROMPTS = ["Say hi.", "Name a color.", "Count to two.", "Pick a fruit.", "Say bye.", "Name a pet."]


def short_reward(prompts, completions, **columns):
    """TRL's signature: rewards short answers."""
    return [-float(len(completion)) for completion in completions]


def es_args(tmp_path, **overrides) -> ESConfig:
    values = dict(output_dir=str(tmp_path / "es"), population_size=4, antithetic=True, sigma=0.05,
                  learning_rate=0.05, iterations=1, batch_size=2, max_new_tokens=4, num_eval=2, eval_every=1,
                  dtype="float32", report_to=[])
    return ESConfig(**read_by_parts(values, overrides, ESConfig))


def rows() -> list[dict]:
    return [{"prompt": prompt, "bonus": float(index)} for index, prompt in enumerate(PROMPTS)]


def files_under(directory: Path) -> list[str]:
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*")) if directory.exists() else []


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


# --- a failed start leaves nothing behind; overwrite replaces a run -------------------------------------------


class Recorder(ESCallback):
    def __init__(self):
        self.iterations = []

    def on_iteration_end(self, trainer, record):
        self.iterations.append(record["iteration"])


BAD_STARTS = {
    "bytes column": (dict(train_dataset=[{**row, "image": b"\x89PNG"} for row in rows()]), DataError,
                     "train_dataset, row 1, column `image`: a bytes value, which JSON cannot hold"),
    "callback object": (dict(callbacks=[object()]), ConfigError, r"callbacks\[0\] is <object .*not an evotune"),
    "callback function": (dict(callbacks=[print]), ConfigError, "subclass it and override its hooks"),
    "callback needing arguments": (dict(callbacks=[type("Needy", (ESCallback,), {"__init__": lambda self, x: None})]),
                                   ConfigError, r"Needy\(\) needs arguments"),
    "transformers callback": (dict(callbacks=["transformers"]), ConfigError, "TrainerCallback hooks take other"),
}


@pytest.mark.parametrize("case", sorted(BAD_STARTS))
def test_a_bad_argument_is_refused_before_anything_is_written(tiny_model_dir, tmp_path, case):
    arguments, error, message = BAD_STARTS[case]
    if arguments.get("callbacks") == ["transformers"]:
        from transformers import TrainerCallback

        arguments = dict(callbacks=[TrainerCallback()])
    with pytest.raises(error, match=message):
        ESTrainer(model=tiny_model_dir, reward_funcs=short_reward, **{"train_dataset": rows(), **arguments},
                  args=es_args(tmp_path))
    assert files_under(tmp_path / "es") == []


@pytest.mark.parametrize("failure", ["peft target modules", "model that does not load"])
def test_a_start_that_fails_inside_the_trainer_removes_what_it_wrote(tiny_model_dir, tmp_path, failure):
    from peft import LoraConfig

    (tmp_path / "es").mkdir()  # empty: a folder of a user's files is refused before anything (tests/runs/test_links.py)
    if failure == "peft target modules":
        bad = dict(model=tiny_model_dir, peft_config=LoraConfig(r=2, target_modules=["qkv_fused"]),
                   args=es_args(tmp_path, space="lora"))
        expected = "qkv_fused match no module of the base model"
    else:
        bad = dict(model=str(tmp_path / "no-such-model"), args=es_args(tmp_path))
        expected = "no-such-model"
    with pytest.raises(Exception, match=expected):
        ESTrainer(reward_funcs=short_reward, train_dataset=rows(), **bad).train()
    assert files_under(tmp_path / "es") == []
    recorder = Recorder()  # the same script, corrected, simply runs again
    ESTrainer(model=tiny_model_dir, reward_funcs=short_reward, train_dataset=rows(), args=es_args(tmp_path),
              callbacks=[recorder]).train()
    assert recorder.iterations == [1]


def test_running_a_script_twice_is_refused_by_name_and_overwrite_replaces_the_run(tiny_model_dir, tmp_path):
    script = dict(model=tiny_model_dir, reward_funcs=short_reward, train_dataset=rows())
    ESTrainer(**script, args=es_args(tmp_path)).train()
    (tmp_path / "es" / "notes.txt").write_text("mine")
    before = (tmp_path / "es" / "metrics.jsonl").read_text()
    again = ESTrainer(**script, args=es_args(tmp_path, iterations=2))
    with pytest.raises(ConfigError, match=r"already holds a run .*resume_from_checkpoint=True.*ESConfig\(overwrite="
                                          r"True\)"):
        again.train()
    assert (tmp_path / "es" / "metrics.jsonl").read_text() == before  # nothing lost
    ESTrainer(**script, args=es_args(tmp_path, iterations=2, overwrite=True)).train()
    assert [record["iteration"] for record in metrics(tmp_path / "es")] == [0, 1, 2]  # one run, not two appended
    assert (tmp_path / "es" / "notes.txt").read_text() == "mine"
    assert "overwrite" not in yaml.safe_load((tmp_path / "es" / "config.yaml").read_text())  # not a run key
    with pytest.raises(ConfigError, match="overwrite is True or False"):
        es_args(tmp_path, overwrite="yes")


# --- datasets ---------------------------------------------------------------------------------------------


def test_a_dict_of_columns_and_a_list_of_prompt_strings_are_datasets(tiny_model_dir, tmp_path):
    from datasets import Dataset

    dataset = Dataset.from_list(rows())
    as_columns = ESTrainer(model=tiny_model_dir, reward_funcs=short_reward, train_dataset=dataset[:4],
                           args=es_args(tmp_path))
    assert as_columns.train_rows == rows()[:4]
    as_strings = ESTrainer(model=tiny_model_dir, reward_funcs=short_reward, train_dataset=PROMPTS,
                           eval_dataset=("Say yes.", "Say no."), args=es_args(tmp_path))
    assert as_strings.train_rows == [{"prompt": prompt} for prompt in PROMPTS]
    assert as_strings.task.eval_rows == [{"prompt": "Say yes."}, {"prompt": "Say no."}]


BAD_DATASETS = {
    "empty eval_dataset": (dict(eval_dataset=[]), "eval_dataset is empty; .* or leave it out"),
    "empty train_dataset": (dict(train_dataset=[]), "train_dataset is empty"),
    "empty Dataset": (dict(train_dataset="empty Dataset"), "train_dataset is empty"),
    "ragged columns": (dict(train_dataset={"prompt": ["a", "b"], "bonus": [1.0]}), "not lists of one length"),
    "columns of scalars": (dict(train_dataset={"prompt": "a"}), "not lists of one length"),
    "mixed strings and dicts": (dict(train_dataset=["a", {"prompt": "b"}]), "mixes prompt strings .row 1."),
    "blank prompt string": (dict(train_dataset=["a", "  "]), "row 2, column `prompt`"),
    "rows of numbers": (dict(train_dataset=[1, 2]), "row 1: expected an object"),
    "eval without train": (dict(train_dataset=None, eval_dataset=["a"]), "eval_dataset without train_dataset"),
}


@pytest.mark.parametrize("case", sorted(BAD_DATASETS))
def test_a_bad_dataset_is_refused_by_name(tiny_model_dir, tmp_path, case):
    arguments, message = BAD_DATASETS[case]
    if arguments.get("train_dataset") == "empty Dataset":
        from datasets import Dataset

        arguments = dict(train_dataset=Dataset.from_list(rows()).select([]))
    with pytest.raises((DataError, ConfigError), match=message):
        ESTrainer(model=tiny_model_dir, reward_funcs=short_reward, **{"train_dataset": rows(), **arguments},
                  args=es_args(tmp_path))
    assert files_under(tmp_path / "es") == []


# --- args, peft_config, resume_from_checkpoint -------------------------------------------------------------


def test_args_as_a_train_config_keeps_its_values_and_other_types_are_refused(tiny_model_dir, tmp_path,
                                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)  # a TrainConfig names no directory: TRL's default, trainer_output
    trainer = ESTrainer(model=tiny_model_dir, reward_funcs=short_reward, train_dataset=rows(),
                        args=TrainConfig(population_size=6, sigma=0.02, iterations=3))
    assert (trainer.config.population_size, trainer.config.sigma, trainer.output_dir) == (6, 0.02,
                                                                                           Path("trainer_output"))
    for args in ({"output_dir": "out"}, "out", 3):
        with pytest.raises(ConfigError, match=f"args is a {type(args).__name__}; ESTrainer takes ESConfig"):
            ESTrainer(model=tiny_model_dir, reward_funcs=short_reward, train_dataset=rows(), args=args)


@pytest.mark.parametrize("targets", [None, "all-linear"])
def test_lora_config_without_target_modules_or_all_linear(tiny_model_dir, tmp_path, targets):
    from peft import LoraConfig

    trainer = ESTrainer(model=tiny_model_dir, reward_funcs=short_reward, train_dataset=rows(),
                        args=es_args(tmp_path, space="lora"), peft_config=LoraConfig(r=2, target_modules=targets))
    trainer.train()
    adapted = json.loads((tmp_path / "es" / "final" / "adapter_config.json").read_text())["target_modules"]
    suffixes = {name.rsplit(".", 1)[-1] for name in adapted}
    if targets is None:  # evotune's default, the attention projections
        assert suffixes == {"q_proj", "k_proj", "v_proj", "o_proj"}
    else:  # PEFT's meaning: every linear layer but the output head
        assert suffixes == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


BAD_PEFT = {
    "regex string": (dict(target_modules=r".*proj"), "a string is a regex to PEFT"),
    "not a LoraConfig": ("prefix", "peft_config is a PrefixTuningConfig; pass peft.LoraConfig"),
    "missing module of a loaded model": (dict(target_modules=["q_proj", "qkv_fused"]),
                                         "peft_config.target_modules: target module.s. qkv_fused match no module"),
    "with a saved adapter": (dict(target_modules=["q_proj"]), "pass only one of them"),
}


@pytest.mark.parametrize("case", sorted(BAD_PEFT))
def test_a_bad_peft_config_is_refused_before_anything_is_written(tiny_model_dir, tmp_path, case):
    from peft import LoraConfig, PrefixTuningConfig
    from transformers import AutoModelForCausalLM

    options, message = BAD_PEFT[case]
    peft_config = PrefixTuningConfig(num_virtual_tokens=2) if options == "prefix" else LoraConfig(r=2, **options)
    adapter = dict(adapter=str(tmp_path)) if case == "with a saved adapter" else {}
    with pytest.raises(ConfigError, match=message):
        ESTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_model_dir), reward_funcs=short_reward,
                  processing_class=_tokenizer(tiny_model_dir), train_dataset=rows(), peft_config=peft_config,
                  args=es_args(tmp_path, space="svd_lora", strategy="cma", antithetic=False, **adapter))
    assert files_under(tmp_path / "es") == []


def _tokenizer(model_dir: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


@pytest.mark.parametrize("value, message", [
    (True, "no checkpoint in .*checkpoint .a new output_dir"),
    ("elsewhere/checkpoint", "keeps its one checkpoint in output_dir/checkpoint"),
    (123, r"resume_from_checkpoint=123 \(int\): pass True"),
    (1.0, r"resume_from_checkpoint=1.0 \(float\)"),
    (["x"], r"\(list\)"),
])
def test_resume_from_checkpoint_on_a_fresh_directory_or_of_a_wrong_type(tiny_model_dir, tmp_path, value, message):
    trainer = ESTrainer(model=tiny_model_dir, reward_funcs=short_reward, train_dataset=rows(), args=es_args(tmp_path))
    with pytest.raises(ConfigError, match=message):
        trainer.train(resume_from_checkpoint=value)
    assert files_under(tmp_path / "es") == []


# --- rewards too large to shape -------------------------------------------------------------------------------


def huge_reward(prompts, completions, **columns):
    """Finite per sample, so accepted where each value is checked, but a batch mean of them overflows."""
    return [1e308 if len(completion) % 2 else -1e308 for completion in completions]


def test_rewards_that_overflow_stop_the_run_by_candidate_with_the_weights_untouched(tiny_model_dir, tmp_path):
    trainer = ESTrainer(model=tiny_model_dir, reward_funcs=huge_reward, train_dataset=PROMPTS, args=es_args(tmp_path))
    with pytest.raises(RewardFunctionError, match=r"iteration 1: .*candidate \d.*Reward functions: [\w.]*huge_reward; "
                                                  r"the batch's first prompt: '"):
        trainer.train()
    assert not (tmp_path / "es" / "checkpoint").exists()  # nothing trained on zeros was saved as a result


@pytest.mark.parametrize("rewards, message", [
    ([1e308, 1.0, float("inf"), 0.0], r"mean reward overflowed float64 \(candidate 3: inf of 4\)"),
    ([float("-inf"), 1.0, 2.0, 0.0], r"candidate 1: -inf"),
    ([1e200, -1e200, 0.0, 1.0], r"range from -1e\+200 \(candidate 2\) to 1e\+200 \(candidate 1\)"),
    ([1e308, -1e308, float("nan"), 0.0], r"too far apart for float64"),
])
@pytest.mark.parametrize("shaping", ["z_score", "centered_rank", "none"])
def test_strategy_tell_refuses_rewards_shaping_cannot_use(rewards, message, shaping):
    from evotune.strategies import OpenES

    strategy = OpenES(population_size=4, sigma=0.1, fitness_shaping=shaping)
    strategy.ask()
    with pytest.raises(RewardFunctionError, match=message):
        strategy.tell(np.array(rewards))
    assert strategy.iteration == 0  # the strategy did not move


def test_large_but_shapeable_rewards_still_train(tiny_model_dir):
    from evotune.strategies import OpenES

    strategy = OpenES(population_size=4, sigma=0.1)
    strategy.ask()
    update, record = strategy.tell(np.array([1e150, -1e150, 0.0, 1.0]))
    assert np.isfinite(record["reward_std"]) and strategy.iteration == 1

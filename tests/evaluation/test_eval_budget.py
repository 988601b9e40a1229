"""Evaluation has a token budget of its own: `eval_max_new_tokens`, else the task's own budget (one that does not
cut its answers), never below training's `max_new_tokens`; training keeps its own budget."""

from __future__ import annotations

import json

import pytest
from helpers import tiny_config
from transformers import AutoTokenizer

from evotune.config import TrainConfig
from evotune.errors import ConfigError
from evotune.evaluation.generation import eval_budget
from evotune.tasks import get_task
from evotune.trainer import Trainer


def sample_lengths(run, tokenizer) -> set[int]:
    """Token counts of the held-out completions in samples.jsonl (the random tiny model never stops early)."""
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    return {len(tokenizer(row["completion"], add_special_tokens=False)["input_ids"]) for row in rows}


def test_the_budget_is_the_keys_else_the_tasks_never_below_training():
    task = get_task("arithmetic", num_eval=4)
    assert task.eval_max_new_tokens is not None and task.eval_max_new_tokens > 10  # "93 + 71 = 164" needs more
    assert eval_budget(task, max_new_tokens=10) == task.eval_max_new_tokens
    assert eval_budget(task, max_new_tokens=200) == 200
    assert eval_budget(task, max_new_tokens=10, eval_max_new_tokens=7) == 7
    assert eval_budget(get_task("conciseness", num_eval=4), max_new_tokens=6) == 128  # answers run long
    assert eval_budget(get_task("countdown", num_eval=4), max_new_tokens=6) == 6  # no budget of its own


def test_a_run_evaluates_with_its_eval_budget_and_trains_with_its_own(tiny_model_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    run = tmp_path / "run"
    trainer = Trainer(tiny_config(tiny_model_dir, iterations=1, max_new_tokens=3, eval_max_new_tokens=9,
                                  report_to=[]), run)
    trainer.train()
    assert trainer.eval_max_new_tokens == 9
    lengths = sample_lengths(run, tokenizer)
    assert max(lengths) > 3 and max(lengths) <= 9  # completions past training's budget were generated and scored
    assert "at most 9 new tokens" in (run / "final" / "README.md").read_text()


def test_eval_budget_may_change_on_resume_but_not_below_one(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    Trainer(tiny_config(tiny_model_dir, iterations=2, eval_max_new_tokens=None, report_to=[]), run).train()
    Trainer(tiny_config(tiny_model_dir, iterations=3, eval_max_new_tokens=12, report_to=[]), run, resume=True)
    with pytest.raises(ConfigError, match="`eval_max_new_tokens` is 0"):
        TrainConfig(eval_max_new_tokens=0)

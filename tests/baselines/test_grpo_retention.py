"""`evotune grpo` with `retention_tasks`: the same retain/ records as `evotune train`, equal to a direct evaluation
of the final weights, KL 0 before training and > 0 after, for GRPO's LoRA and its full-parameter policy."""

from __future__ import annotations

import json
import math

import pytest
from helpers import TINY_EVAL_BUDGET, first_in_ci, requires_trl

from evotune.cli.main import main
from evotune.evaluation.generation import eval_budget, evaluate_model
from evotune.tasks import get_task

pytestmark = requires_trl


@pytest.mark.parametrize("lora", first_in_ci([True, False]))
def test_grpo_logs_retention_equal_to_a_direct_evaluation(lora, tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evotune.backends import HFBackend

    run = tmp_path / "grpo"
    assert main(["grpo", "--output-dir", str(run), "--set", f"model={tiny_model_dir}", "--set", "task=conciseness",
                 "--set", "iterations=1", "--set", "batch_size=2", "--set", "num_generations=2",
                 "--set", "max_new_tokens=6", "--set", "num_eval=2", "--set", "eval_every=1",
                 "--set", f"learning_rate={0.05 if lora else 0.01}", "--set", f"lora={str(lora).lower()}",
                 "--set", "report_to=[]", "--set", "retention_tasks=[ifeval, countdown]",
                 "--set", "retention_num_eval=12", "--set", f"eval_max_new_tokens={TINY_EVAL_BUDGET}"]) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evaluated = [r for r in records if "eval/reward" in r]
    assert [r["iteration"] for r in evaluated] == [0, 1]
    assert all({"retain/ifeval/reward", "retain/ifeval/kl", "retain/countdown/accuracy"} <= set(r) for r in evaluated)
    assert evaluated[0]["retain/ifeval/kl"] == 0 and evaluated[0]["retain/countdown/kl"] == 0
    assert evaluated[-1]["retain/ifeval/kl"] > 0 and evaluated[-1]["retain/countdown/kl"] > 0

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    if lora:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(run / "final"))
    else:
        model = AutoModelForCausalLM.from_pretrained(str(run / "final"))
    tokenizer = AutoTokenizer.from_pretrained(str(run / "final"))
    tokenizer.padding_side = "left"
    backend = HFBackend(model.eval(), tokenizer)
    for name in ("ifeval", "countdown"):
        task = get_task(name, seed=0, num_eval=12)
        metrics, _ = evaluate_model(backend, task, task.eval_rows, eval_budget(task, 6))
        for metric, value in metrics.items():
            assert math.isclose(evaluated[-1][f"retain/{name}/{metric}"], value, rel_tol=1e-9), (name, metric)
    # not all zero, so the equality above compares real numbers
    assert any(evaluated[-1][f"retain/ifeval/{metric}"] for metric in ("reward", "instruction_strict"))
    assert (run / "curves.png").exists()

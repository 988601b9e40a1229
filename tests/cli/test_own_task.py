"""A user's own task end to end, as the guide lays it out: a reward module and a dataset beside the config, trained
from that folder and from another, then `evotune eval RUN_DIR` scoring the run with no other flag, which must
reproduce the run's own last held-out score; and `--dataset --reward-fn` scoring a custom task by hand."""

from __future__ import annotations

import json
import sys

import pytest
import yaml
from helpers import TINY_EVAL_BUDGET

from evotune.cli.main import main

REWARD = """def exact_match(prompts, completions, answer, **kwargs):
    return [1.0 if completion.strip() == expected else 0.5 * (expected in completion)
            for completion, expected in zip(completions, answer)]
"""


@pytest.fixture
def project(tmp_path, tiny_model_dir, monkeypatch):
    """The guide's three files in a folder of their own (the module name unique to this test)."""
    folder = tmp_path / "project"
    (folder / "data").mkdir(parents=True)
    name = f"my_rewards_{tmp_path.name.replace('-', '_')}"
    (folder / f"{name}.py").write_text(REWARD)
    rows = [{"prompt": f"What is {a} + {b}? Reply with only the number.", "answer": str(a + b)}
            for a in range(1, 7) for b in range(1, 4)]
    (folder / "data" / "my_prompts.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "my_task.yaml").write_text(yaml.safe_dump(dict(
        model=tiny_model_dir, task="custom", dataset="data/my_prompts.jsonl", reward_fns=[f"{name}.exact_match"],
        space="lowrank", population_size=4, antithetic=True, batch_size=2, sigma=0.05, learning_rate=0.05,
        iterations=2, max_new_tokens=TINY_EVAL_BUDGET, num_eval=4, eval_every=1, dtype="float32", report_to=[])))
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield folder, name
    sys.modules.pop(name, None)


def test_train_beside_the_reward_then_eval_the_run_with_no_other_flag(project, tmp_path, monkeypatch, capsys):
    folder, name = project
    monkeypatch.chdir(folder)
    assert main(["train", "my_task.yaml", "--output-dir", "runs/my_task"]) == 0
    run = folder / "runs" / "my_task"
    recorded = yaml.safe_load((run / "config.yaml").read_text())
    assert recorded["reward_fns"] == [f"{folder / name}.py:exact_match"]
    last = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][-1]
    capsys.readouterr()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the run's config.yaml names its reward's file: found from any folder
    sys.modules.pop(name, None)
    assert main(["eval", str(run), "--output", "scores.json"]) == 0
    scored = json.loads((elsewhere / "scores.json").read_text())
    assert len(scored) == 1 and scored[0]["num_eval"] == 4
    assert scored[0]["max_new_tokens"] == TINY_EVAL_BUDGET
    assert scored[0]["reward"] == pytest.approx(last["eval/reward"], abs=1e-9)  # the run's own split and budget


def test_a_config_run_from_another_folder_finds_the_reward_beside_it(project, tmp_path, monkeypatch):
    folder, name = project
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    # the dataset path is the current folder's, as every path key is: given absolute here
    assert main(["train", str(folder / "my_task.yaml"), "--output-dir", "run", "--set",
                 f"dataset={folder / 'data' / 'my_prompts.jsonl'}", "--set", "iterations=1"]) == 0
    assert yaml.safe_load((elsewhere / "run" / "config.yaml").read_text())["reward_fns"] == [
        f"{folder / name}.py:exact_match"]


def test_eval_scores_a_custom_task_from_flags(project, monkeypatch, tiny_model_dir, capsys):
    folder, name = project
    monkeypatch.chdir(folder)
    assert main(["eval", "--model", tiny_model_dir, "--dataset", "data/my_prompts.jsonl", "--reward-fn",
                 f"{name}:exact_match", "--num-eval", "3", "--max-new-tokens", "4", "--dtype", "float32"]) == 0
    scored = json.loads((folder / "evotune-eval-custom.json").read_text())
    assert scored[0]["num_eval"] == 3 and 0.0 <= scored[0]["reward"] <= 1.0


def error_of(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())  # the message wrapped to the terminal, unwrapped


def test_eval_without_a_run_or_a_task_says_what_to_give(capsys):
    assert main(["eval"]) == 2
    assert "a run directory (evotune eval runs/my_task) or --model MODEL with --task TASK" in error_of(capsys)
    assert main(["eval", "--model", "smollm2-135m-instruct"]) == 2
    assert "needs --task" in error_of(capsys)


def test_eval_of_a_folder_that_is_not_a_run_names_it(tmp_path, capsys):
    assert main(["eval", str(tmp_path)]) == 2
    assert f"{tmp_path}/config.yaml does not exist, so {tmp_path} is not an evotune run directory" in \
        error_of(capsys)

"""`reward_timeout`: a reward that never returns stops the run with the prompt that hung, and leaves nothing behind
(the same command runs again once the reward is fixed); in a Ray worker too."""

from __future__ import annotations

import json
import threading
import time

import pytest
from helpers import TINY_EVAL_BUDGET, requires_ray

from evotune.cli.main import main
from evotune.errors import RewardFunctionError
from evotune.tasks.base import call_reward_fn

HANGING = """import time


def hangs(prompts, completions, hang=None, **kwargs):
    if hang is None or any(hang):  # rows marked `hang: false` (held-out ones below) are scored
        time.sleep(3600)  # a judge that never answers
    return [0.0] * len(completions)
"""


def test_a_call_past_its_timeout_names_the_prompt_in_the_main_thread_and_in_another():
    rows = [{"prompt": "What is 2 + 2? (the prompt that hung)"}]

    def hangs(prompts, completions, **kwargs):
        time.sleep(60)

    started = time.monotonic()
    with pytest.raises(RewardFunctionError, match=r"within 0.5 s \(`reward_timeout`\).*prompt that hung"):
        call_reward_fn(hangs, rows, ["4"], timeout=0.5)
    caught = []
    worker = threading.Thread(target=lambda: caught.append(pytest.raises(RewardFunctionError, call_reward_fn, hangs,
                                                                          rows, ["4"], timeout=0.5)))
    worker.start()
    worker.join(10)
    assert caught and "did not return within 0.5 s" in str(caught[0].value)
    assert time.monotonic() - started < 5
    assert call_reward_fn(lambda prompts, completions, **kw: [1.0], rows, ["4"], timeout=0.5) == [1.0]


def write_task(folder, tiny_model_dir, **extra) -> str:
    (folder / "hanging_rewards.py").write_text(HANGING)
    (folder / "data.jsonl").write_text("".join(json.dumps({"prompt": f"Say {word}."}) + "\n"
                                               for word in ("one", "two", "three", "four", "five", "six")))
    values = dict(model=tiny_model_dir, task="custom", dataset=str(folder / "data.jsonl"),
                  reward_fns=["hanging_rewards:hangs"], population_size=2, batch_size=2, iterations=1, num_eval=2,
                  max_new_tokens=4, eval_max_new_tokens=TINY_EVAL_BUDGET, dtype="float32", report_to=[],
                  reward_timeout=2, **extra)
    (folder / "task.yaml").write_text(json.dumps(values))  # YAML reads JSON
    return str(folder / "task.yaml")


def test_a_hanging_reward_stops_the_run_naming_the_prompt_and_leaves_nothing(tiny_model_dir, tmp_path, capsys):
    config = write_task(tmp_path, tiny_model_dir)
    started = time.monotonic()
    assert main(["train", config, "--output-dir", str(tmp_path / "run")]) == 2
    error = " ".join(capsys.readouterr().err.split())
    assert "hanging_rewards.hangs did not return within 2 s (`reward_timeout`)" in error and "first prompt: " \
           "'Say" in error, error[-1500:]
    assert time.monotonic() - started < 120 and not (tmp_path / "run").exists()


@pytest.mark.engine
@requires_ray
def test_a_hanging_reward_in_a_ray_worker_stops_the_run_too(tiny_model_dir, tmp_path):
    import subprocess
    import sys

    # the held-out rows (scored by the driver) answer; the training rows hang, in the pool's actor
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"prompt": f"Say {n}.", "hang": True}) + "\n"
                                                  for n in range(6)))
    (tmp_path / "held_out.jsonl").write_text("".join(json.dumps({"prompt": f"Say {n}.", "hang": False}) + "\n"
                                                     for n in range(2)))
    config = write_task(tmp_path, tiny_model_dir, distributed="ray", workers=1)
    done = subprocess.run([sys.executable, "-m", "evotune.cli.main", "train", config, "--output-dir",
                           str(tmp_path / "run"), "--set", f"dataset={tmp_path / 'train.jsonl'}", "--set",
                           f"eval_dataset={tmp_path / 'held_out.jsonl'}"], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    error = " ".join(done.stderr.split())
    assert done.returncode == 2 and "did not return within 2 s (`reward_timeout`)" in error, error[-2000:]
    assert "first prompt: 'Say" in error and "held-out" not in error
    assert not (tmp_path / "run").exists()

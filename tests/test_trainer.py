"""The training loop on a tiny real model: learning step, run directory, resume equality, bad rewards."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import tiny_config, train_until_killed, write_module

from evotune.errors import ConfigError, RewardFunctionError
from evotune.trainer import Trainer


def masters(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in trainer.space.master.items()}


def test_parameters_change_after_one_step(tiny_model_dir, tmp_path):
    trainer = Trainer(tiny_config(tiny_model_dir), tmp_path / "run")
    before = {name: param.detach().clone() for name, param in trainer.backend.model.named_parameters()}
    record = trainer.step()
    assert record["reward_std"] > 0  # the perturbations produced different completions
    changed = [name for name, param in trainer.backend.model.named_parameters()
               if not torch.equal(param, before[name])]
    assert len(changed) == len(before)


def test_run_directory_contract(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    run = tmp_path / "run"
    trainer = Trainer(tiny_config(tiny_model_dir), run)
    trainer.train()
    assert (run / "config.yaml").exists() and (run / "curves.png").stat().st_size > 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["iteration"] == 0 and "eval/reward" in records[0]
    train_records = [r for r in records if "reward_mean" in r]
    assert [r["iteration"] for r in train_records] == [1, 2, 3, 4]
    for key in ("reward_mean", "reward_std", "reward_max", "time_s"):
        assert all(key in r for r in train_records)
    assert "eval/reward" in train_records[1] and "eval/reward" in train_records[3]
    assert (run / "checkpoint" / "state.json").exists()
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    reloaded = AutoModelForCausalLM.from_pretrained(run / "final")
    for name, param in reloaded.named_parameters():  # the saved model is the trained mean
        assert torch.equal(param, trainer.space.master[name]), name


def test_resume_gives_the_same_final_weights(tiny_model_dir, tmp_path, monkeypatch):
    uninterrupted = Trainer(tiny_config(tiny_model_dir), tmp_path / "a")
    uninterrupted.train()
    expected = masters(uninterrupted)

    killed = Trainer(tiny_config(tiny_model_dir), tmp_path / "b")
    train_until_killed(monkeypatch, killed, 4)  # during iteration 4, after the checkpoint at iteration 2
    resumed = Trainer(tiny_config(tiny_model_dir), tmp_path / "b", resume=True)
    assert resumed.strategy.iteration == 2
    resumed.train()
    for name, tensor in expected.items():
        assert torch.equal(tensor, resumed.space.master[name]), name
    iterations = [json.loads(line)["iteration"] for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert iterations == [0, 1, 2, 3, 4]  # the lost iteration 3 is not logged twice


def test_replaying_the_update_log_from_the_base_model_gives_the_final_weights(tiny_model_dir, tmp_path):
    from evotune.files.checkpoint import load_checkpoint
    from evotune.optimizers import SGD

    trainer = Trainer(tiny_config(tiny_model_dir), tmp_path / "run")
    trainer.train()
    log = load_checkpoint(tmp_path / "run" / "checkpoint")["update_log"]
    assert len(log) == 4
    fresh = Trainer(tiny_config(tiny_model_dir, report_to=[]), tmp_path / "fresh")
    fresh.space.optimizer = SGD(learning_rate=0.05)
    fresh.space.replay(log)
    for name, tensor in trainer.space.master.items():
        assert torch.equal(tensor, fresh.space.master[name]), name


def test_existing_checkpoint_without_resume_is_refused(tiny_model_dir, tmp_path):
    Trainer(tiny_config(tiny_model_dir, iterations=2), tmp_path / "run").train()
    with pytest.raises(ConfigError, match="--resume"):
        Trainer(tiny_config(tiny_model_dir), tmp_path / "run")


def test_raising_reward_function_names_the_prompt_and_leaves_a_resumable_run(tiny_model_dir, tmp_path, monkeypatch):
    write_module(tmp_path, monkeypatch, "raising_rewards", "def explode(prompts, completions, **columns):\n"
                                        "    raise ZeroDivisionError('boom')\n")
    config = tiny_config(tiny_model_dir, reward_fns=["raising_rewards.explode"])
    trainer = Trainer(config, tmp_path / "run")
    before = {name: param.detach().clone() for name, param in trainer.backend.model.named_parameters()}
    with pytest.raises(RewardFunctionError) as error:
        trainer.train()
    message = str(error.value)
    assert "explode" in message and "boom" in message
    prompt = trainer.task.eval_rows[0]["prompt"]
    assert (prompt if isinstance(prompt, str) else prompt[-1]["content"])[:30] in message
    for name, param in trainer.backend.model.named_parameters():  # no perturbation left behind
        assert torch.equal(param, before[name])


def test_nan_reward_is_reported(tiny_model_dir, tmp_path, monkeypatch):
    write_module(tmp_path, monkeypatch, "nan_rewards", "def nan_reward(prompts, completions, **columns):\n"
                                        "    return [float('nan')] * len(prompts)\n")
    trainer = Trainer(tiny_config(tiny_model_dir, reward_fns=["nan_rewards.nan_reward"]), tmp_path / "run")
    with pytest.raises(RewardFunctionError, match="nan_reward"):
        trainer.train()


def test_reward_error_mid_run_leaves_a_run_that_resumes_to_the_same_weights(tiny_model_dir, tmp_path, monkeypatch):
    """A reward function that breaks at iteration 3; after fixing it, --resume ends where a clean run ends."""
    marker = tmp_path / "broken"
    write_module(tmp_path, monkeypatch, "flaky_rewards",
                 "import pathlib\n"
                 f"MARKER = pathlib.Path({str(marker)!r})\n"
                 "def length(prompts, completions, **columns):\n"
                 "    if MARKER.exists():\n"
                 "        raise RuntimeError('backend for the judge is down')\n"
                 "    return [-float(len(c[0]['content'])) for c in completions]\n")
    config = tiny_config(tiny_model_dir, reward_fns=["flaky_rewards:length"], report_to=[])
    clean = Trainer(config, tmp_path / "clean")
    clean.train()

    broken = Trainer(config, tmp_path / "broken-run")
    real_step = Trainer.step

    def step_then_break(self):
        if self.strategy.iteration == 2:
            marker.write_text("")
        return real_step(self)

    monkeypatch.setattr(Trainer, "step", step_then_break)
    with pytest.raises(RewardFunctionError, match="judge is down"):
        broken.train()
    monkeypatch.setattr(Trainer, "step", real_step)
    marker.unlink()
    resumed = Trainer(config, tmp_path / "broken-run", resume=True)
    assert resumed.strategy.iteration == 2
    resumed.train()
    for name, tensor in clean.space.master.items():
        assert torch.equal(tensor, resumed.space.master[name]), name


def test_curves_are_redrawn_at_every_evaluation_while_the_run_trains(tiny_model_dir, tmp_path, monkeypatch):
    """curves.png is there after the iteration-2 evaluation, before training ends (a user watching the run sees it).
    Here every evaluation redraws it; a real run redraws at most every CurvesRedraw.every_seconds."""
    from evotune.callbacks import ESCallback
    from evotune.tracking.tracker import CurvesRedraw

    monkeypatch.setattr(CurvesRedraw, "every_seconds", 0.0)

    seen = []

    class Peek(ESCallback):
        def on_iteration_end(self, trainer, record):
            curves = trainer.output_dir / "curves.png"
            seen.append((record["iteration"], curves.exists() and curves.stat().st_size > 0))

    Trainer(tiny_config(tiny_model_dir, iterations=4, eval_every=2, report_to=[]), tmp_path / "run",
            callbacks=[Peek()]).train()
    # the user's callback runs before the metrics callback of the same iteration: iteration 1 sees the plot of
    # the baseline evaluation, 3 that of iteration 2's
    assert seen == [(1, True), (2, True), (3, True), (4, True)]
    assert not list((tmp_path / "run").glob(".*partial*"))  # written beside, then renamed


def test_curves_are_not_redrawn_more_often_than_every_seconds(tiny_model_dir, tmp_path, monkeypatch):
    """Drawing curves.png costs about half a second: an evaluation within every_seconds of the last drawing (or of
    the start) skips it, and the end of the run draws it whole."""
    from evotune.tracking import tracker

    drawn = []
    plot = tracker.plot_curves
    monkeypatch.setattr(tracker, "plot_curves", lambda *args, **kwargs: drawn.append(1) or plot(*args, **kwargs))
    monkeypatch.setattr(tracker.CurvesRedraw, "every_seconds", 3600.0)
    Trainer(tiny_config(tiny_model_dir, iterations=4, eval_every=1, report_to=[]), tmp_path / "run").train()
    assert drawn == [1]  # 5 evaluations, one drawing: the end's
    assert (tmp_path / "run" / "curves.png").stat().st_size > 0

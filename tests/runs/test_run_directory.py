"""The run directory contract under misuse: resume keeps the run's config, nothing is overwritten unasked,
diverged weights are never saved, and reward functions that skip everything are reported."""

from __future__ import annotations

import pytest
import torch
import yaml
from helpers import tiny_config, write_module

from evotune.cli.main import main
from evotune.errors import ConfigError, EvotuneError, RewardFunctionError
from evotune.trainer import Trainer


@pytest.fixture
def finished_run(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    Trainer(tiny_config(tiny_model_dir, iterations=2, report_to=[]), run).train()
    return run


@pytest.fixture(scope="module")
def refused_run(tiny_model_dir, tmp_path_factory):
    """One finished run for every refused resume: each must leave all of it as it was."""
    run = tmp_path_factory.mktemp("refused") / "run"
    Trainer(tiny_config(tiny_model_dir, iterations=2, report_to=[]), run).train()
    return run


def contents(run) -> dict:
    return {path.relative_to(run): path.read_bytes() for path in sorted(run.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("key, value", [("seed", 5), ("sigma", 0.01), ("population_size", 6), ("noise", "gaussian"),
                                        ("learning_rate", 0.1), ("model", "smollm2-135m-instruct")])
def test_resume_refuses_a_key_that_changes_the_run_and_writes_nothing(tiny_model_dir, refused_run, key, value):
    before = contents(refused_run)
    with pytest.raises(ConfigError, match=f"`{key}`"):
        Trainer(tiny_config(tiny_model_dir, iterations=4, report_to=[], **{key: value}), refused_run, resume=True)
    assert contents(refused_run) == before


def test_resume_may_extend_the_run_and_config_yaml_says_so(tiny_model_dir, finished_run):
    trainer = Trainer(tiny_config(tiny_model_dir, iterations=3, eval_every=1, report_to=[]), finished_run,
                      resume=True)
    trainer.train()
    assert trainer.strategy.iteration == 3
    resolved = yaml.safe_load((finished_run / "config.yaml").read_text())
    assert resolved["iterations"] == 3 and resolved["eval_every"] == 1


def test_cli_resume_reads_the_runs_own_config(tiny_model_dir, tmp_path, capsys):
    """Resuming without the config file or the original --set flags continues the same run."""
    run = tmp_path / "run"
    flags = ["--set", f"model={tiny_model_dir}", "--set", "task=conciseness", "--set", "population_size=4",
             "--set", "iterations=1", "--set", "batch_size=2", "--set", "max_new_tokens=3", "--set", "num_eval=2",
             "--set", "dtype=float32", "--set", "report_to=[]", "--set", "seed=7"]
    assert main(["train", "--output-dir", str(run), *flags]) == 0
    assert main(["train", "--output-dir", str(run), "--resume", "--set", "iterations=2"]) == 0
    resolved = yaml.safe_load((run / "config.yaml").read_text())
    assert resolved["seed"] == 7 and resolved["iterations"] == 2 and resolved["model"] == tiny_model_dir
    assert main(["train", "--output-dir", str(run), "--resume", "--set", "seed=8"]) == 2
    assert "`seed` 7 -> 8" in " ".join(capsys.readouterr().err.split())


def test_a_run_without_checkpoint_is_not_overwritten(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for name, text in (("config.yaml", "model: mine\n"), ("metrics.jsonl", "{}\n"), ("notes.txt", "keep me\n")):
        (run / name).write_text(text)
    (run / "final").mkdir()
    with pytest.raises(ConfigError, match="--overwrite") as error:
        Trainer(tiny_config(tiny_model_dir, iterations=1, report_to=[]), run)
    assert "config.yaml" in str(error.value) and "final" in str(error.value)
    assert "pass --resume to continue it" in str(error.value)  # it has no checkpoint, but a config: resumable
    assert (run / "config.yaml").read_text() == "model: mine\n"
    Trainer(tiny_config(tiny_model_dir, iterations=1, report_to=[]), run, overwrite=True).train()
    assert (run / "final" / "config.json").exists() and (run / "notes.txt").read_text() == "keep me\n"


def test_resume_of_a_directory_that_holds_no_run_says_so(tiny_model_dir, tmp_path):
    # a run stopped before its first checkpoint resumes from iteration 0 (test_resume_before_checkpoint.py); a
    # directory without the run's config.yaml is no run at all
    with pytest.raises(ConfigError, match="config.yaml does not exist.*start a new run without --resume"):
        Trainer(tiny_config(tiny_model_dir, report_to=[]), tmp_path / "empty", resume=True)
    assert not (tmp_path / "empty").exists()


def test_diverging_weights_stop_the_run_before_anything_is_saved(tiny_model_dir, tmp_path):
    trainer = Trainer(tiny_config(tiny_model_dir, learning_rate=1e40, iterations=3, checkpoint_every=1,
                                  report_to=[]), tmp_path / "run")
    with pytest.raises(EvotuneError, match="NaN or infinite"):
        trainer.train()
    assert not (tmp_path / "run" / "checkpoint").exists() and not (tmp_path / "run" / "final").exists()


def test_a_checkpoint_with_nan_weights_is_refused(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    trainer = Trainer(tiny_config(tiny_model_dir, iterations=1, report_to=[]), run)
    trainer.train()
    name = next(iter(trainer.space.master))
    trainer.space.master[name].view(-1)[0] = torch.nan
    trainer.save_checkpoint()
    with pytest.raises(EvotuneError, match="NaN or infinite"):
        Trainer(tiny_config(tiny_model_dir, iterations=2, report_to=[]), run, resume=True)


def test_reward_functions_that_skip_every_sample_are_reported_with_a_prompt(tiny_model_dir, tmp_path, monkeypatch):
    write_module(tmp_path, monkeypatch, "skipping_rewards", "def skip(prompts, completions, **columns):\n"
                                        "    return [None] * len(prompts)\n")
    trainer = Trainer(tiny_config(tiny_model_dir, reward_fns=["skipping_rewards.skip"], report_to=[]),
                      tmp_path / "run")
    trainer.evaluate = lambda: {}  # the held-out evaluation skips too; the training step is under test
    with pytest.raises(RewardFunctionError, match="None") as error:
        trainer.train()
    prompt = trainer.task.train_rows[trainer.batch_indices(0)[0]]["prompt"]
    assert repr(prompt)[:20] in str(error.value)


@pytest.mark.parametrize("clock", ["wall", "cpu"])
def test_max_training_seconds_stops_like_a_last_iteration_and_resumes_with_the_time_spent(tiny_model_dir, tmp_path,
                                                                                          clock):
    """A tiny budget ends the run after its first iteration with an evaluation, a checkpoint and final/; the
    time spent (on the budget's clock: wall, or the process tree's CPU seconds) is part of the checkpoint, so a
    resume with a larger budget continues and adds to it. Every step records both clocks."""
    import json

    run = tmp_path / "run"
    first = Trainer(tiny_config(tiny_model_dir, iterations=50, eval_every=0, checkpoint_every=0, report_to=[],
                                max_training_seconds=1e-6, training_clock=clock), run)
    first.train()
    assert first.strategy.iteration == 1
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["iteration"] == 1 and "eval/reward" in records[-1]  # evaluated as a last iteration
    assert (run / "final" / "config.json").exists() and (run / "checkpoint").is_dir()
    spent = first.training_seconds
    assert spent == pytest.approx(records[-1]["cpu_s" if clock == "cpu" else "time_s"])
    assert records[-1]["cpu_s"] > 0 and records[-1]["time_s"] > 0

    resumed = Trainer(tiny_config(tiny_model_dir, iterations=50, eval_every=0, checkpoint_every=0, report_to=[],
                                  max_training_seconds=spent + 1e-6, training_clock=clock), run, resume=True)
    assert resumed.training_seconds == spent  # restored from the checkpoint, not restarted at 0
    resumed.train()
    assert resumed.strategy.iteration == 2 and resumed.training_seconds > spent


def test_a_negative_time_budget_is_refused_by_name(tiny_model_dir):
    with pytest.raises(ConfigError, match="max_training_seconds"):
        tiny_config(tiny_model_dir, max_training_seconds=-5.0).validate()


def test_dtype_auto_is_recorded_resolved_and_a_resume_keeps_the_runs_dtype(tiny_model_dir, tmp_path):
    """config.yaml holds what `auto` chose on the machine that started the run; resuming with `auto` (the default)
    elsewhere uses that dtype, not this machine's choice, so the resumed run is the same run."""
    from evotune.backends.models import resolve_dtype

    run = tmp_path / "run"
    first = Trainer(tiny_config(tiny_model_dir, iterations=1, dtype="auto", report_to=[]), run)
    chosen = resolve_dtype("auto", "cpu")
    assert first.config.dtype == chosen  # resolved as the Trainer is built; written with the run, in train()
    first.train()
    assert yaml.safe_load((run / "config.yaml").read_text())["dtype"] == chosen
    other = "bfloat16" if chosen == "float32" else "float32"  # as if another machine had started it
    values = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**values, "dtype": other}, sort_keys=False))
    resumed = Trainer(tiny_config(tiny_model_dir, iterations=2, dtype="auto", report_to=[]), run, resume=True)
    assert resumed.config.dtype == other
    assert next(resumed.backend.model.parameters()).dtype == getattr(torch, other)
    with pytest.raises(ConfigError, match="`dtype`"):  # an explicit other dtype still changes the run: refused
        Trainer(tiny_config(tiny_model_dir, iterations=2, dtype=chosen, report_to=[]), run, resume=True)


@pytest.mark.parametrize("written, keys", [("grpo", {"num_generations": 8, "lora": True}),
                                           ("sft", {"num_train": 300, "epochs": 1})])
def test_train_resume_of_another_commands_run_names_that_command(tmp_path, capsys, written, keys):
    """It said `unknown key num_generations` (or num_train); the run and the command that resumes it are named."""
    from evotune.cli.main import main

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"model": "smollm2-135m-instruct", "task": "arithmetic", **keys}))
    assert main(["train", "--output-dir", str(run), "--resume"]) == 2
    message = " ".join(capsys.readouterr().err.split())
    assert f"{run} is an `evotune {written}` run, not an `evotune train` run: resume it with `evotune {written} " \
           f"--output-dir {run} --resume`" in message

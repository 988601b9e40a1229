"""CLI smoke runs with tiny budgets, and the one-paragraph errors users see."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml
from helpers import TINY_EVAL_BUDGET

from evotune.cli.main import main


def write_config(tmp_path, model_dir: str, **overrides) -> str:
    values = dict(model=model_dir, task="conciseness", population_size=4, antithetic=True, sigma=0.05,
                  learning_rate=0.05, iterations=2, batch_size=2, max_new_tokens=4, num_eval=2, eval_every=1,
                  checkpoint_every=1, dtype="float32", report_to=[], eval_max_new_tokens=TINY_EVAL_BUDGET)
    values.update(overrides)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)


def test_train_smoke_run_with_overrides(tiny_model_dir, tmp_path, capsys):
    config = write_config(tmp_path, tiny_model_dir)
    run = tmp_path / "run"
    assert main(["train", config, "--output-dir", str(run), "--set", "iterations=3", "--set", "seed=4",
                 "--set", "learning_rate=5e-2"]) == 0  # YAML reads 5e-2 as a string; it must become 0.05
    resolved = yaml.safe_load((run / "config.yaml").read_text())
    assert resolved["iterations"] == 3 and resolved["seed"] == 4 and resolved["learning_rate"] == 0.05
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["iteration"] == 3
    assert (run / "final" / "config.json").exists()
    captured = capsys.readouterr()
    assert "eval/reward" in json.loads(captured.out)
    # the config file makes full-es (its default space) and leaves noise to that method's own default: the line names
    # the method, and no other method's defaults are weighed against it
    note = " ".join(captured.err.split())
    assert "evotune: method full-es: keys the config leaves out take its defaults" in note and "quickstart" not in note
    assert resolved["method"] == "full-es" and resolved["noise"] == "rademacher"
    # a finished run can be extended with --resume
    assert main(["train", config, "--output-dir", str(run), "--set", "iterations=4", "--resume"]) == 0
    assert "evotune: method" not in capsys.readouterr().err  # a resume keeps the run's own config
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["iteration"] == 4


@pytest.mark.parametrize("override, expected", [
    ("sigmaa=0.1", "unknown key `sigmaa`; did you mean `sigma`?"),
    ("sigma=0", "`sigma` is 0"),
    ("population_size=1", "at least 2"),
    ("task=nonexistent", "nonexistent"),
    ("antithetic=maybe", "true or false"),
    ("sigma=big", "must be a number"),
    ("iterations=2.5", "whole number"),
])
def test_bad_config_is_one_paragraph_with_the_fix(tiny_model_dir, tmp_path, capsys, override, expected):
    config = write_config(tmp_path, tiny_model_dir)
    assert main(["train", config, "--output-dir", str(tmp_path / "run"), "--set", override]) == 2
    err = capsys.readouterr().err
    assert expected in " ".join(err.split())
    assert "Traceback" not in err


def test_unknown_model_is_a_clear_error(tmp_path, capsys):
    code = main(["eval", "--model", str(tmp_path / "missing-model"), "--task", "arithmetic", "--num-eval", "2"])
    assert code == 2
    assert "does not exist" in " ".join(capsys.readouterr().err.split())


def test_eval_writes_json_for_several_models(tiny_model_dir, tmp_path, capsys):
    output = tmp_path / "metrics.json"
    samples = tmp_path / "samples.jsonl"
    assert main(["eval", "--model", tiny_model_dir, "--model", tiny_model_dir, "--task", "arithmetic",
                 "--num-eval", "3", "--max-new-tokens", "4", "--output", str(output),
                 "--samples", str(samples)]) == 0
    results = json.loads(output.read_text())
    assert len(results) == 2 and results[0]["num_eval"] == 3
    assert results[0]["accuracy"] == results[1]["accuracy"]  # same model, greedy: same numbers
    assert len(samples.read_text().splitlines()) == 6
    assert "accuracy" in capsys.readouterr().out


def test_console_script_is_installed():
    """The `evotune` script that `pip install` puts on PATH (scripts/setup.sh installs it with pip install -e)."""
    script = shutil.which("evotune")
    if script is None:
        pytest.skip("no `evotune` on PATH: install the package (pip install -e . or bash scripts/setup.sh)")
    result = subprocess.run([script, "keys"], capture_output=True, text=True)
    assert result.returncode == 0 and "population_size" in result.stdout


@pytest.mark.parametrize("fails, where", [
    ("final", "stopped after iteration 2, while writing final/"),
    ("checkpoint", "stopped after iteration 2, while logging, evaluating and checkpointing it"),
    ("step", "stopped during iteration 2"),
])
def test_a_failed_run_says_whether_it_stopped_during_an_iteration_or_after_it(tiny_model_dir, tmp_path, monkeypatch,
                                                                             capsys, fails, where):
    """A disk that fills while final/ or a checkpoint is written stops a run after an iteration, not during the
    next one (a 2-iteration run's final/ was reported as "iteration 3")."""
    from evotune.errors import OutputError
    from evotune.trainer import Trainer

    def fail(*args, **kwargs):
        raise OutputError("No space left on device (injected)")

    if fails == "final":
        monkeypatch.setattr(Trainer, "finish", fail)
    elif fails == "checkpoint":
        real = Trainer.save_checkpoint
        monkeypatch.setattr(Trainer, "save_checkpoint",
                            lambda self: fail() if self.strategy.iteration == 2 else real(self))
    else:
        real_step = Trainer.step
        monkeypatch.setattr(Trainer, "step", lambda self: fail() if self.strategy.iteration == 1 else real_step(self))
    settings = [f"model={tiny_model_dir}", "iterations=2", "population_size=4", "batch_size=2", "max_new_tokens=4",
                "num_eval=2", "eval_every=0", "checkpoint_every=1", "report_to=[]", "dtype=float32"]
    argv = ["train", "--output-dir", str(tmp_path / "run"), *[part for pair in settings for part in ("--set", pair)]]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"evotune: {where}" in err and "Traceback" not in err, err

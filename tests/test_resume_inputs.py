"""Smaller inputs that used to pass silently or fail raw: an unknown device, a resume that would shorten the run's
record, a resume with a spent time budget and nothing left to do, a perturbation rank above a matrix's rank.
Each is refused with an error naming the key and the fix, and the run's files are left as they were."""

from __future__ import annotations

import pytest
import yaml
from helpers import tiny_config

from evotune.cli.main import main
from evotune.config import TrainConfig
from evotune.errors import ConfigError
from evotune.sft import SFTConfig
from evotune.trainer import Trainer


@pytest.mark.parametrize("device", ["banana", "meta", "cuda:x", "CPU", ""])
def test_an_unknown_device_is_refused_by_every_config(device):
    for config in (TrainConfig, SFTConfig):
        with pytest.raises(ConfigError, match=r"`device` is .*use cpu, cuda, cuda:N"):
            config(device=device)


def test_cli_names_the_device_without_a_traceback(tmp_path, capsys):
    # main() is what the `evotune` command runs: an error it did not turn into its message would raise here
    assert main(["train", "--output-dir", str(tmp_path / "run"), "--set", "device=banana"]) == 2
    assert "`device` is 'banana'" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def snapshot(run) -> dict[str, bytes]:
    return {str(path.relative_to(run)): path.read_bytes() for path in sorted(run.rglob("*")) if path.is_file()}


def test_resume_with_fewer_iterations_than_done_is_refused_and_changes_nothing(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    Trainer(tiny_config(tiny_model_dir, iterations=4, report_to=[]), run).train()
    before = snapshot(run)
    with pytest.raises(ConfigError, match="has done 4 iterations, so `iterations` 2 .* set iterations to 4 or more"):
        Trainer(tiny_config(tiny_model_dir, iterations=2, report_to=[]), run, resume=True)
    assert snapshot(run) == before
    assert yaml.safe_load((run / "config.yaml").read_text())["iterations"] == 4


def test_resume_of_a_run_whose_time_budget_is_spent_says_what_to_raise(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    config = tiny_config(tiny_model_dir, iterations=50, max_training_seconds=1e-6, report_to=[])
    Trainer(config, run).train()  # stops after its first iteration: the budget is spent
    before = snapshot(run)
    with pytest.raises(ConfigError, match=r"already spent its max_training_seconds .* --set max_training_seconds="):
        Trainer(config, run, resume=True)
    assert snapshot(run) == before
    raised = tiny_config(tiny_model_dir, iterations=2, max_training_seconds=0.0, report_to=[])
    Trainer(raised, run, resume=True).train()  # raising it (here: no limit) continues the run
    assert yaml.safe_load((run / "config.yaml").read_text())["iterations"] == 2


def test_a_spent_budget_with_a_torn_final_is_still_repaired(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    config = tiny_config(tiny_model_dir, iterations=50, max_training_seconds=1e-6, report_to=[])
    Trainer(config, run).train()
    (run / "final" / "README.md").unlink()  # a kill while final/ was written
    Trainer(config, run, resume=True).train()
    assert "## Reproduce" in (run / "final" / "README.md").read_text()


def test_a_perturbation_rank_above_a_matrix_rank_is_refused_naming_the_matrix(tiny_model_dir, tmp_path):
    # the tiny model's smallest perturbed matrices are 16 wide (hidden size 16)
    with pytest.raises(ConfigError, match=r"`perturbation_rank` is 1000, above the rank of the \d+ x \d+ matrix "
                                          r"model\.layers\.\d+\..*\(at most \d+\)"):
        Trainer(tiny_config(tiny_model_dir, space="lowrank", perturbation_rank=1000, report_to=[]), tmp_path / "run")
    assert not (tmp_path / "run" / "config.yaml").exists()


def test_resume_of_a_finished_run_says_nothing_was_trained_and_how_to_go_on(tiny_model_dir, tmp_path, capsys):
    from evotune.cli.main import main

    run = tmp_path / "run"
    Trainer(tiny_config(tiny_model_dir, iterations=2, report_to=[]), run).train()
    capsys.readouterr()
    assert main(["train", "--output-dir", str(run), "--resume"]) == 0
    error = " ".join(capsys.readouterr().err.split())
    assert (f"evotune: {run} had already run its 2 iterations: nothing was trained, and final/ holds its last mean. "
            "To train on: --set iterations=N (more than it ran).") in error


def test_a_run_whose_config_yaml_was_deleted_gets_one_way_forward(tiny_model_dir, tmp_path, capsys):
    """--resume without config.yaml named the directory "not a run" and sent the user to start anew, where a new
    run was refused as "already holds a run: pass --resume": now the advice names the files that stay and both
    ways out, and --overwrite (without --resume) does start the run again."""
    from evotune.cli.main import main

    run = tmp_path / "run"
    Trainer(tiny_config(tiny_model_dir, iterations=2, report_to=[]), run).train()
    (run / "config.yaml").unlink()
    capsys.readouterr()
    assert main(["train", "--output-dir", str(run), "--resume"]) == 2
    error = " ".join(capsys.readouterr().err.split())
    assert f"config.yaml is gone, though {run} holds a run's metrics.jsonl, checkpoint, final" in error
    assert "put back the config.yaml" in error and "--overwrite (without --resume)" in error

"""One run lifecycle (runs/lifecycle.py) for train, sft and grpo: building a run writes nothing, its refusals leave
every file as it was and read the same for every command, and the finished model is moved into place whole."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import tiny_config

from evotune.errors import ConfigError
from evotune.runs.lifecycle import BOTH_FLAGS, RunLifecycle
from evotune.trainer import Trainer


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(path.relative_to(directory)): path.read_bytes() for path in sorted(directory.rglob("*"))
            if path.is_file()}


@pytest.fixture(scope="module")
def finished(tiny_model_dir, tmp_path_factory):
    run = tmp_path_factory.mktemp("finished") / "run"
    Trainer(tiny_config(tiny_model_dir, iterations=2, report_to=[]), run).train()
    return run


def test_building_a_trainer_writes_nothing_until_train(tiny_model_dir, tmp_path):
    run = tmp_path / "deep" / "run"
    trainer = Trainer(tiny_config(tiny_model_dir, iterations=2, report_to=[]), run)
    assert not (tmp_path / "deep").exists()  # no directory, no lock file, no config.yaml
    trainer.train()
    assert {"config.yaml", "metrics.jsonl", "checkpoint", "final"} <= {path.name for path in run.iterdir()}
    assert not any(path.name.startswith(".evotune-lock") for path in run.iterdir())  # given back


def test_overwrite_and_resume_change_nothing_before_train(finished, tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    before = snapshot(run)
    Trainer(tiny_config(tiny_model_dir, iterations=2, report_to=[]), run, overwrite=True)
    Trainer(tiny_config(tiny_model_dir, iterations=3, report_to=[]), run, resume=True)
    assert snapshot(run) == before


def test_overwrite_replaces_the_run_only_when_it_trains(finished, tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    (run / "notes.txt").write_text("mine")
    trainer = Trainer(tiny_config(tiny_model_dir, iterations=1, report_to=[]), run, overwrite=True)
    trainer.train()
    assert (run / "notes.txt").read_text() == "mine"  # the user's file stays
    assert len([line for line in (run / "metrics.jsonl").read_text().splitlines() if '"samples_seen"' in line]) == 1


def test_a_run_started_elsewhere_between_build_and_train_is_refused_under_the_lock(finished, tiny_model_dir,
                                                                                   tmp_path):
    """The checks run again under the lock: a run that appeared after the Trainer was built is not overwritten."""
    run = tmp_path / "run"
    trainer = Trainer(tiny_config(tiny_model_dir, iterations=1, report_to=[]), run)
    shutil.copytree(finished, run)  # another process's run, finished meanwhile
    before = snapshot(run)
    with pytest.raises(ConfigError, match="already holds a run .*--overwrite"):
        trainer.train()
    assert snapshot(run) == before


def test_the_final_model_is_moved_into_place_whole(finished, tiny_model_dir, tmp_path, monkeypatch):
    """A failure while final/ is written (a kill, a full disk) leaves the earlier final/ as it was, not a mix."""
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    before = snapshot(run / "final")
    trainer = Trainer(tiny_config(tiny_model_dir, iterations=3, report_to=[]), run, resume=True)

    def torn(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("evotune.trainer.write_model_card", torn)  # after the weights were written beside
    with pytest.raises(Exception, match="No space left"):
        trainer.train()
    assert snapshot(run / "final") == before
    assert not any(path.name.endswith(".partial") for path in run.iterdir())


@pytest.mark.parametrize("command", ["train", "sft", "grpo"])
def test_resume_with_overwrite_reads_the_same_for_every_command(command, tiny_model_dir, tmp_path):
    from evotune.baselines.grpo import GRPORunConfig, run_grpo
    from evotune.config.sft import SFTConfig
    from evotune.sft import run_sft

    run = tmp_path / "run"
    with pytest.raises(ConfigError) as refused:
        if command == "train":
            Trainer(tiny_config(tiny_model_dir), run, resume=True, overwrite=True)
        elif command == "sft":
            run_sft(SFTConfig(model=tiny_model_dir, task="arithmetic"), run, resume=True, overwrite=True)
        else:
            run_grpo(GRPORunConfig(model=tiny_model_dir), str(run), resume=True, overwrite=True)
    assert str(refused.value) == BOTH_FLAGS
    assert not run.exists()


def test_a_lifecycle_of_ones_own(tmp_path):
    """The lifecycle is a library piece: a command of one's own gets the refusals, the lock and the cleanup."""
    run = RunLifecycle(tmp_path / "mine", ("config.yaml", "result.txt"))
    assert run.inspect() is None and not (tmp_path / "mine").exists()
    with pytest.raises(RuntimeError), run.opened({"x": 1}):
        (tmp_path / "mine" / "result.txt").write_text("half")
        raise RuntimeError("the command failed before finishing anything")
    assert not (tmp_path / "mine").exists()  # a failed new run leaves nothing, its directory included
    with run.opened({"x": 1}, iterations_done=lambda: 1):
        (tmp_path / "mine" / "result.txt").write_text("done")
    again = RunLifecycle(tmp_path / "mine", ("config.yaml", "result.txt"))
    with pytest.raises(ConfigError, match=r"already holds a run \(config.yaml, result.txt\).*overwrite=True"):
        again.inspect()


def test_a_refused_sft_start_leaves_the_directory_as_it_was_and_the_corrected_command_runs(tiny_model_dir, tmp_path,
                                                                                           capsys):
    """The data is read after the run directory opens (its lock, config.yaml): a data error there must take back
    everything the start wrote, so the corrected command needs no --overwrite."""
    from evotune.cli.main import main

    output = tmp_path / "out"
    output.mkdir()  # empty: a folder of a user's files is refused before the run opens (test_links.py)
    before = snapshot(output)
    data = tmp_path / "data.jsonl"
    data.write_text('{"prompt": "2+2=", "answer": "4"}\n' * 4)  # no `completion` column
    command = ["sft", "--set", f"model={tiny_model_dir}", "--set", f"dataset={data}", "--set", "max_steps=1",
               "--set", "batch_size=2", "--set", "report_to=[]", "--output-dir", str(output)]
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "completion" in err and "Traceback" not in err, err
    assert snapshot(output) == before  # as it was: nothing of the run
    data.write_text('{"prompt": "2+2=", "completion": "4"}\n' * 4)
    assert main(command) == 0, capsys.readouterr().err
    assert (output / "adapter" / "adapter_config.json").exists()


def test_a_sweep_whose_every_run_fails_at_once_leaves_no_run_behind_and_the_same_command_runs_again(
        tiny_model_dir, tmp_path, monkeypatch, capsys):
    from helpers import flaky_reward_module

    from evotune.cli.main import main

    flag = flaky_reward_module(tmp_path, monkeypatch)
    config = tmp_path / "base.yaml"
    config.write_text(f"model: {tiny_model_dir}\ntask: conciseness\nreward_fns: [flaky_rewards.score]\n"
                      "population_size: 4\nantithetic: true\niterations: 1\nbatch_size: 2\nmax_new_tokens: 4\n"
                      "num_eval: 2\ndtype: float32\nreport_to: []\n")
    command = ["sweep", str(config), "--grid", "sigma=0.01", "--output-dir", str(tmp_path / "sweep")]
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "flaky_rewards.score raised ValueError" in err and "Traceback" not in err, err
    runs = [path for path in (tmp_path / "sweep").rglob("config.yaml")]
    assert runs == []  # the failed run's files went: only the sweep's table of what failed is there
    flag.unlink()
    assert main(command) == 0, capsys.readouterr().err  # no --overwrite needed
    assert len(list((tmp_path / "sweep").rglob("final"))) == 1

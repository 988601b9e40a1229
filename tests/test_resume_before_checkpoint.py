"""`--resume` of a run stopped before its first checkpoint (issue 41: a kill -9 between config.yaml and the first
save): nothing it computed was saved, so it starts again from iteration 0 with a one-line note and ends on the
uninterrupted run's weights; a directory that is not a run of this config, or whose checkpoint is damaged, or that
holds a finished final/ without its checkpoint is still refused, and nothing in it is touched."""

from __future__ import annotations

import contextlib
import json
import pathlib
import shutil

import pytest
import torch
from helpers import flaky_reward_module, tiny_config, train_until_killed
from safetensors.torch import load_file

from evotune.cli.main import main
from evotune.errors import ConfigError
from evotune.runs import directory as run_directory
from evotune.trainer import Trainer


def config_for(model_dir: str, **overrides):
    # checkpoint_every 3 of 2 iterations: the only checkpoint is the last iteration's, so a kill at iteration 2
    # leaves a run with a logged iteration and no checkpoint
    return tiny_config(model_dir, **{"iterations": 2, "checkpoint_every": 3, "eval_every": 1, **overrides})


def weights(run) -> dict[str, torch.Tensor]:
    return load_file(str(run / "final" / "model.safetensors"))


def same_weights(run, reference) -> bool:
    ours, theirs = weights(run), weights(reference)
    return ours.keys() == theirs.keys() and all(torch.equal(ours[name], theirs[name]) for name in ours)


def iterations_logged(run) -> list[int]:
    return [json.loads(line)["iteration"] for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def reference(tiny_model_dir, tmp_path_factory):
    """The uninterrupted run every resumed one must end on."""
    run = tmp_path_factory.mktemp("reference") / "run"
    Trainer(config_for(tiny_model_dir), run).train()
    return run


def snapshot(run) -> dict[str, bytes]:
    return {str(path.relative_to(run)): path.read_bytes() for path in sorted(run.rglob("*")) if path.is_file()}


def killed_after_config(model_dir: str, run, monkeypatch) -> None:
    """What a kill leaves between writing config.yaml and loading the model, plus a first save's checkpoint.tmp
    cut short: the run's config and nothing computed."""
    run_directory.prepare(run, config_for(model_dir), resume=False, overwrite=False)
    (run / "checkpoint.tmp").mkdir()
    (run / "checkpoint.tmp" / "space.safetensors").write_bytes(b"torn")


def killed_after_an_iteration(model_dir: str, run, monkeypatch) -> None:
    """A kill as iteration 2 begins: iteration 0's evaluation and iteration 1 logged, no checkpoint yet."""
    train_until_killed(monkeypatch, Trainer(config_for(model_dir), run), at_step=2)
    assert iterations_logged(run) == [0, 1] and not (run / "checkpoint").exists()


@pytest.mark.parametrize("kill, note", [(killed_after_config, "iteration 0 with its config.yaml."),
                                        (killed_after_an_iteration, "the 1 iteration(s) it logged are run again")])
def test_resume_before_the_first_checkpoint_starts_the_run_and_ends_on_its_weights(
        tiny_model_dir, tmp_path, monkeypatch, capsys, reference, kill, note):
    run = tmp_path / "run"
    kill(tiny_model_dir, run, monkeypatch)
    capsys.readouterr()
    assert main(["train", "--output-dir", str(run), "--resume"]) == 0
    printed = " ".join(capsys.readouterr().err.split())
    assert "has no checkpoint yet" in printed and note in printed and "--overwrite" not in printed
    assert same_weights(run, reference)
    assert iterations_logged(run) == iterations_logged(reference) == [0, 1, 2]  # each once: none lost or doubled
    assert not (run / "checkpoint.tmp").exists()


def test_a_changed_key_is_still_refused_and_the_stopped_run_is_left_as_it_was(tiny_model_dir, tmp_path, monkeypatch):
    run = tmp_path / "run"
    killed_after_config(tiny_model_dir, run, monkeypatch)
    before = snapshot(run)
    with pytest.raises(ConfigError, match="`sigma`"):
        Trainer(config_for(tiny_model_dir, sigma=0.5), run, resume=True)
    assert snapshot(run) == before


def test_a_directory_without_config_yaml_is_not_a_run_to_resume(tiny_model_dir, tmp_path):
    for run in (tmp_path / "missing", tmp_path / "only_mine"):
        if run.name == "only_mine":
            run.mkdir()
            (run / "notes.txt").write_text("mine")
        with pytest.raises(ConfigError, match="config.yaml does not exist.*start a new run without --resume"):
            Trainer(config_for(tiny_model_dir), run, resume=True)
    assert not (tmp_path / "missing").exists() and snapshot(tmp_path / "only_mine") == {"notes.txt": b"mine"}


def test_a_damaged_checkpoint_or_a_final_without_one_is_refused_and_kept(tiny_model_dir, tmp_path, reference):
    damaged = tmp_path / "damaged"
    shutil.copytree(reference, damaged)
    shutil.rmtree(damaged / "checkpoint.old", ignore_errors=True)
    (damaged / "checkpoint" / "space.safetensors").write_bytes(b"damaged")
    finished = tmp_path / "finished"
    shutil.copytree(reference, finished)
    for name in ("checkpoint", "checkpoint.old"):
        shutil.rmtree(finished / name, ignore_errors=True)
    for run, message in ((damaged, "every checkpoint in .* is damaged"),
                         (finished, "holds a finished final/ but no checkpoint/ .* Put checkpoint/ back")):
        before = snapshot(run)
        warned = pytest.warns(UserWarning, match="damaged") if run is damaged else contextlib.nullcontext()
        with pytest.raises(ConfigError, match=message), warned:
            Trainer(config_for(tiny_model_dir), run, resume=True)
        assert snapshot(run) == before


def test_a_kill_while_config_yaml_is_rewritten_leaves_the_old_one_whole(tiny_model_dir, tmp_path, monkeypatch):
    """Every resume rewrites config.yaml; a mapping cut short would resume on defaults for the keys it lost."""
    run = tmp_path / "run"
    run_directory.prepare(run, config_for(tiny_model_dir), resume=False, overwrite=False)
    before = (run / "config.yaml").read_text()
    real_write = pathlib.Path.write_text

    def torn_write(self, text, *args, **kwargs):  # half the text reaches the disk, then the kill
        real_write(self, text[:len(text) // 2], *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(pathlib.Path, "write_text", torn_write)
    with pytest.raises(KeyboardInterrupt):
        run_directory.prepare(run, config_for(tiny_model_dir, iterations=3), resume=True, overwrite=False)
    monkeypatch.undo()
    assert (run / "config.yaml").read_text() == before




def test_a_restarted_run_whose_reward_fails_keeps_its_config_so_the_same_resume_runs_again(
        tiny_model_dir, tmp_path, monkeypatch, capsys):
    """The two rules agree: a new run that fails before its first iteration is removed (the same command starts it
    again); a --resume that restarted from iteration 0 keeps config.yaml, so the same --resume starts it again."""
    flag = flaky_reward_module(tmp_path, monkeypatch)
    run = tmp_path / "run"
    run_directory.prepare(run, config_for(tiny_model_dir, reward_fns=["flaky_rewards.score"]), resume=False,
                          overwrite=False)
    command = ["train", "--output-dir", str(run), "--resume"]
    assert main(command) == 2
    printed = " ".join(capsys.readouterr().err.split())
    assert "the grader is down" in printed and f"evotune train --output-dir {run} --resume" in printed
    assert (run / "config.yaml").exists()
    flag.unlink()
    assert main(command) == 0
    assert iterations_logged(run) == [0, 1, 2]

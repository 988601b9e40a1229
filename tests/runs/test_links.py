"""Nothing is written or deleted through a symbolic link: a run directory, its final/ or checkpoint/ that is a link
is refused in one line naming it, before anything changes, so the folder it points to (a user's own files) keeps
every byte; and an --overwrite whose removal fails leaves the run as it was."""

from __future__ import annotations

import os

import pytest
import yaml
from helpers import tiny_config

from evotune.cli.main import main
from evotune.errors import OutputError
from evotune.files.atomic import staged
from evotune.runs.lifecycle import RunLifecycle
from evotune.trainer import Trainer


def contents(folder) -> dict:
    return {path.relative_to(folder): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.fixture
def run_and_users_folder(tiny_model_dir, tmp_path):
    """A finished 2-iteration run, and a user's folder holding a model's config.json and a note."""
    run = tmp_path / "run"
    Trainer(tiny_config(tiny_model_dir, iterations=2, report_to=[]), run).train()
    users = tmp_path / "users_model"
    users.mkdir()
    (users / "config.json").write_text('{"mine": true}\n')
    (users / "notes.txt").write_text("do not touch\n")
    return run, users


def error_line(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("flags", [["--resume", "--set", "iterations=4"], ["--overwrite"]])
def test_a_final_that_links_to_a_users_folder_is_refused_and_nothing_changes(run_and_users_folder, flags, capsys):
    run, users = run_and_users_folder
    (run / "final").rename(run / "final.moved")
    (run / "final").symlink_to(users, target_is_directory=True)
    before_users, before_run = contents(users), contents(run)
    config = str(run / "config.yaml") if "--overwrite" in flags else None
    assert main(["train", *([config] if config else []), "--output-dir", str(run), *flags]) == 2
    message = error_line(capsys)
    assert f"{run / 'final'} is a symbolic link (to {users})" in message and "never writes or deletes" in message
    assert contents(users) == before_users  # the user's config.json and notes, byte for byte
    assert contents(run) == before_run and (run / "final").is_symlink()  # config.yaml, metrics, checkpoints kept


def test_a_run_directory_or_checkpoint_that_is_a_link_is_refused(run_and_users_folder, tmp_path, capsys):
    run, users = run_and_users_folder
    linked = tmp_path / "linked_run"
    linked.symlink_to(run, target_is_directory=True)
    assert main(["train", "--output-dir", str(linked), "--resume", "--set", "iterations=4"]) == 2
    assert f"output directory {linked} is a symbolic link (to {run})" in error_line(capsys)
    (run / "checkpoint").rename(run / "checkpoint.moved")
    (run / "checkpoint").symlink_to(users, target_is_directory=True)
    before = contents(users)
    assert main(["train", "--output-dir", str(run), "--resume", "--set", "iterations=4"]) == 2
    assert f"{run / 'checkpoint'} is a symbolic link" in error_line(capsys) and contents(users) == before


def test_an_overwrite_whose_removal_fails_leaves_the_run_as_it_was(run_and_users_folder, monkeypatch):
    """The second rename fails (a busy file on another system, say): the first one is moved back."""
    run, _ = run_and_users_folder
    before = contents(run)
    real_rename, calls = os.rename, []

    def failing_rename(source, target):
        calls.append(source)
        if len(calls) == 2:
            raise PermissionError(13, "Permission denied", str(source))
        return real_rename(source, target)

    monkeypatch.setattr(os, "rename", failing_rename)
    lifecycle = RunLifecycle(run, ("config.yaml", "metrics.jsonl", "checkpoint", "final"), overwrite=True)
    with pytest.raises(PermissionError):
        lifecycle.clear()
    monkeypatch.setattr(os, "rename", real_rename)
    assert contents(run) == before and not [path for path in run.iterdir() if path.name.startswith(".evotune-rem")]
    lifecycle.clear()  # and when nothing fails, all of it goes
    assert not (run / "config.yaml").exists() and not (run / "checkpoint").exists()


def test_an_export_to_a_link_is_refused_and_its_target_kept(run_and_users_folder, tmp_path, capsys):
    run, users = run_and_users_folder
    target = tmp_path / "export_here"
    target.symlink_to(users, target_is_directory=True)
    before = contents(users)
    assert main(["export", str(run), "--output-dir", str(target), "--overwrite"]) == 2
    assert f"{target} is a symbolic link" in error_line(capsys) and contents(users) == before
    with pytest.raises(OutputError, match="symbolic link"), staged(target):
        pass
    assert yaml.safe_load((run / "config.yaml").read_text())["iterations"] == 2


@pytest.mark.parametrize("flags", [[], ["--overwrite"]])
def test_a_run_into_a_folder_of_a_users_files_is_refused_and_writes_nothing(tiny_model_dir, tmp_path, capsys, flags):
    """A folder holding `passwd` and `hosts` got run files beside them; it is refused as export refuses it."""
    folder = tmp_path / "etc_like"
    folder.mkdir()
    (folder / "passwd").write_text("root:x:0:0\n")
    (folder / "hosts").write_text("127.0.0.1 localhost\n")
    before = contents(folder)
    assert main(["train", "--output-dir", str(folder), "--set", f"model={tiny_model_dir}", "--set", "iterations=1",
                 *flags]) == 2
    assert f"{folder} holds files that are not an evotune run's (hosts, passwd)" in error_line(capsys)
    assert contents(folder) == before and sorted(path.name for path in folder.iterdir()) == ["hosts", "passwd"]

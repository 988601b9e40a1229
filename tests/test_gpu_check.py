"""bench/gpu_check.sh, the script a lent GPU machine runs, dry-run on CPU with the tiny model so it cannot rot.

CI's dry run leaves out the `full_compiled` arm: torch.compile of the tiny model's decoding step costs ~10 s of a
cold interpreter. That arm is the others' es_row with one config key (checked below on every push), compiled
generation has its own tests (tests/backends/test_compile_generation.py), and the slow test runs every arm."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = ("--population-size 4 --population-batch-size 2 --batch-size 2 --max-new-tokens 4 --iterations 2 "
            "--num-eval 4 --dtype float32")


def load_gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dry_run(tiny_model_dir: str, tmp_path: Path, arms: list[str]) -> dict:
    output = tmp_path / "gpu_check.json"
    environment = {**os.environ, "DEVICE": "cpu", "MODEL": tiny_model_dir, "OUTPUT": str(output),
                   "WORK": str(tmp_path / "runs"), "GPU_CHECK_ARGS": f"{SETTINGS} --arms {' '.join(arms)}",
                   "TIMEOUT": "300"}
    done = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "run"], env=environment, cwd=ROOT,
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(output.read_text())
    assert report["facts"]["device"] == "cpu"
    assert report["resume"]["differing"] == 0 and report["resume"]["tensors"] > 0, report["resume"]
    for arm in (arm for arm in arms if arm != "grpo"):
        row = report[arm]
        assert "error" not in row, (arm, row)
        assert row["iterations"] == 2 and row["seconds_per_iteration"] > 0 and 0 <= row["accuracy_after"] <= 1
    assert report["full_batched"]["settings"] == {"population_batch_size": 2}
    assert report["full_batched"]["candidates_per_generate"] == 2
    # the same greedy tokens with and without the host syncs: the same learning
    assert report["full_own_loop"]["accuracy_after"] == report["full_one_at_a_time"]["accuracy_after"]
    assert "error" not in report["grpo"], report["grpo"]
    return report


def test_gpu_check_dry_run_on_cpu(tiny_model_dir, tmp_path):
    gpu_check = load_gpu_check()
    arms = [arm for arm in [*gpu_check.ARMS, "grpo"] if arm != "full_compiled"]
    report = dry_run(tiny_model_dir, tmp_path, arms)
    assert "full_compiled" not in report  # --arms picks


def test_every_arm_is_a_config_train_accepts(tiny_model_dir):
    """Each arm's overrides on the script's base settings make a valid TrainConfig (a renamed key fails here)."""
    from evotune.config import TrainConfig

    gpu_check = load_gpu_check()
    args = argparse.Namespace(model=tiny_model_dir, population_size=4, iterations=2, batch_size=2, max_new_tokens=4,
                              num_eval=4, device="cpu", dtype="float32")
    for name, overrides in gpu_check.ARMS.items():
        config = TrainConfig(**gpu_check.base_config(args, **overrides))
        for key, value in overrides.items():
            assert getattr(config, key) == value, (name, key)
    assert gpu_check.ARMS["full_compiled"] == {"compile_generation": True}


@pytest.mark.slow
def test_gpu_check_dry_run_on_cpu_with_every_arm(tiny_model_dir, tmp_path):
    report = dry_run(tiny_model_dir, tmp_path, [*load_gpu_check().ARMS, "grpo"])
    assert report["full_compiled"]["settings"] == {"compile_generation": True}
    assert "error" not in report["full_compiled"], report["full_compiled"]

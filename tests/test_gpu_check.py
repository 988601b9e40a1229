"""bench/gpu_check.sh, the script a lent GPU machine runs, dry-run on CPU with the tiny model so it cannot rot."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run_on_cpu(tiny_model_dir, tmp_path):
    output = tmp_path / "gpu_check.json"
    settings = ("--population-size 4 --population-batch-size 2 --batch-size 2 --max-new-tokens 4 --iterations 2 "
                "--num-eval 4 --dtype float32")
    environment = {**os.environ, "DEVICE": "cpu", "MODEL": tiny_model_dir, "OUTPUT": str(output),
                   "WORK": str(tmp_path / "runs"), "GPU_CHECK_ARGS": settings, "TIMEOUT": "300"}
    done = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "run"], env=environment, cwd=ROOT,
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(output.read_text())
    assert report["facts"]["device"] == "cpu"
    assert report["resume"]["differing"] == 0 and report["resume"]["tensors"] > 0, report["resume"]
    for arm in ("full_one_at_a_time", "full_own_loop", "full_compiled", "full_batched", "lowrank"):
        row = report[arm]
        assert "error" not in row, (arm, row)
        assert row["iterations"] == 2 and row["seconds_per_iteration"] > 0 and 0 <= row["accuracy_after"] <= 1
    assert report["full_batched"]["settings"] == {"population_batch_size": 2}
    assert report["full_batched"]["candidates_per_generate"] == 2
    assert report["full_compiled"]["settings"] == {"compile_generation": True}
    # the same greedy tokens with and without the host syncs: the same learning
    assert report["full_own_loop"]["accuracy_after"] == report["full_one_at_a_time"]["accuracy_after"]
    assert "error" not in report["grpo"], report["grpo"]

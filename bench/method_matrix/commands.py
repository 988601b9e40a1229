"""What the method matrix's jobs share below job.py: an evotune command in its own process with its wall time and
peak memory, a run's metrics and config files, and the SFT warm start made (job.py) or made again (restore.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from .arms import sft_keys


def run_command(arguments: list[str], log: Path) -> dict[str, Any]:
    """Run an evotune command in its own process; its wall time and peak resident memory (wait4's rusage)."""
    started = time.perf_counter()
    with log.open("w") as handle:
        process = subprocess.Popen([sys.executable, "-m", "evotune.cli.main", *arguments], stdout=handle,
                                   stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"`evotune {' '.join(arguments)}` exited with {code}; its log: {log}\n"
                           + log.read_text()[-3000:])
    return {"wall_s": round(time.perf_counter() - started, 1), "peak_rss_mib": round(usage.ru_maxrss / 1024, 1)}


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def write_config(run: Path, keys: dict[str, Any]) -> Path:
    if run.exists():
        shutil.rmtree(run)  # a job interrupted earlier starts again whole
    run.parent.mkdir(parents=True, exist_ok=True)
    path = run.parent / f"{run.name}.yaml"
    path.write_text(yaml.safe_dump(keys, sort_keys=True))
    return path


def sft_folder(runs: Path, task: str, seed: int) -> Path:
    """Where a task's SFT of a seed lives under --runs: its adapter/ and its merged/ model."""
    return runs / task / f"sft_seed{seed}"


def sft_and_merge(job: dict, runs: Path) -> tuple[Path, dict[str, Any]]:
    """SFT on the task's own solutions (a LoRA) into RUNS/<task>/sft_seed<seed>, and that adapter merged into a
    full model beside it (merged/): the run folder and what the training cost."""
    run = sft_folder(runs, job["task"], job["seed"])
    config = write_config(run, sft_keys(job["task"], job["seed"]))
    cost = run_command(["sft", str(config), "--output-dir", str(run)], run.parent / f"{run.name}.log")
    run_command(["export", str(run / "adapter"), "--merge", "--dtype", "float32", "--output-dir", str(run / "merged")],
                run.parent / f"{run.name}_merge.log")
    steps = [r for r in records(run) if "loss" in r]
    return run, {"training_seconds": round(sum(r["time_s"] for r in steps), 1), "steps": len(steps), **cost,
                 "adapter_sha256": adapter_digest(run / "adapter")}


def adapter_digest(adapter: Path) -> str:
    """sha256 over an adapter's tensors (names, dtypes, shapes, bytes) in name order: equal exactly when the weights
    are, whatever the file's header holds."""
    import hashlib

    import torch
    from safetensors.torch import load_file

    digest = hashlib.sha256()
    for name, tensor in sorted(load_file(str(adapter / "adapter_model.safetensors")).items()):
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()

"""The scaling study, one command: every arm on every shape this machine runs (GPU-only shapes excluded on a CPU),
smallest shape first, one cell at a time on every core, each cell in its own guarded process (guard.py). It runs only
the cells whose result file is missing, so it resumes where a session stopped; each finished cell writes one small
file, bench/results/scaling/<dtype>/<shape>/<arm>.json (no weights), committed at once with --commit. Every file
records the machine (CPU model, AMX and AVX-512 BF16 flags, threads, torch) and this session's speed probe.

    python -m bench.scaling.run --cache /work/scaling_models --commit          # the study
    python -m bench.scaling.run --plan                                          # the cells, done or missing
    python -m bench.scaling.run --shapes SmolLM2-135M --arms generation full_es  # a subset
    touch /tmp/evotune_scaling.stop                                             # stop after the cell in progress
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

from bench.common import commit_file, cpu_facts

from .arms import ARMS
from .guard import default_limit_mib
from .shapes import SHAPES

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "scaling"
DTYPE = "float32"  # on a CPU: the method study's dtype (bfloat16 is slower than float32 without AMX)
GPU_DTYPE = "bfloat16"
# a cell beside more other work than this fraction of its own CPU seconds did not time the machine alone: run again
SHARED_LIMIT = 0.05
ATTEMPTS = 3


def shared(record: dict) -> bool:
    other, cpu = record.get("other_work_cpu_s"), record.get("cpu_s")
    return bool(other is not None and cpu and other > SHARED_LIMIT * cpu)


def cpu_record() -> dict:
    import torch

    return {**cpu_facts(), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "python": platform.python_version()}


def speed_probe(dtype: str) -> dict:
    """`evotune doctor --speed`'s probe at the study's dtype and threads, once per session of the runner."""
    code = f"import json; from evotune.doctor import speed_probe; print(json.dumps(speed_probe(dtype={dtype!r})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def cells(shapes: list[str], arms: list[str], gpu: bool) -> list[tuple[str, str]]:
    return [(shape, arm) for shape in shapes if gpu or not SHAPES[shape].gpu_only for arm in arms]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/evotune_scaling_models"),
                        help="where the shapes' random-weight models are built once (never committed)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/evotune_scaling_work"))
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES))
    parser.add_argument("--arms", nargs="*", default=list(ARMS))
    parser.add_argument("--limit-mib", type=float, default=None,
                        help="the memory limit of a cell (default: MemAvailable minus guard.RESERVE_MIB)")
    parser.add_argument("--commit", action="store_true")
    parser.add_argument("--plan", action="store_true")
    parser.add_argument("--stop-file", type=Path, default=Path("/tmp/evotune_scaling.stop"),
                        help="when this file exists, stop after the cell in progress (no cell's timing is cut)")
    args = parser.parse_args()
    import torch

    from .cell import run_cell

    gpu = torch.cuda.is_available()
    # on a GPU: bfloat16 (the papers' dtype there), every shape; on a CPU float32, the GPU-only shapes left out
    device, dtype = ("cuda", GPU_DTYPE) if gpu else ("cpu", DTYPE)
    todo = cells(args.shapes, args.arms, gpu=gpu)
    folder = args.results / dtype
    if args.plan:
        for shape, arm in todo:
            print(("done    " if (folder / shape / f"{arm}.json").is_file() else "missing ") + f"{shape} {arm}")
        return
    machine, probe = cpu_record(), speed_probe(dtype)
    for shape, arm in todo:
        path = folder / shape / f"{arm}.json"
        if path.is_file():
            continue
        if args.stop_file.exists():
            print(f"scaling: {args.stop_file} exists: stopped before {shape} {arm}", flush=True)
            return
        limit = args.limit_mib or default_limit_mib()
        print(f"scaling: {shape} {arm} (limit {limit:,.0f} MiB)", flush=True)
        for attempt in range(1, ATTEMPTS + 1):
            record = run_cell(shape, arm, dtype, args.cache, args.work / shape / arm, limit, device=device)
            if not shared(record):
                break
            print(f"scaling: {shape} {arm}: other work took {record['other_work_cpu_s']} CPU s beside the cell's "
                  f"{record['cpu_s']} (attempt {attempt} of {ATTEMPTS})", flush=True)
        record["shared_machine"] = shared(record)  # the last attempt's timing was not the machine's alone
        record.update(machine=machine, speed_probe=probe, date=time.strftime("%Y-%m-%d %H:%M"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1) + "\n")
        print(f"scaling: {shape} {arm}: {record['status']}", flush=True)
        if args.commit:
            commit_file(path, f"scaling study: {dtype}/{shape}/{arm}.json ({record['status']})", "scaling")


if __name__ == "__main__":
    main()

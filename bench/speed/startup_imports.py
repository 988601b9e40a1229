"""`evotune train` with and without import_utils.startup_imports, side by side in one run.

A short run on a tiny random Llama (with SmolLM2's tokenizer), so start-up is most of it: each repeat starts it
twice, alternating, once as the `evotune` command does (console_main: the command's imports without the garbage
collector, then frozen) and once through main() alone (the collector as Python starts it).

    python -m bench.speed.startup_imports --repeats 5      # -> bench/results/speed/startup_imports.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import study_results

SETTINGS = ["task=conciseness", "iterations=4", "population_size=4", "batch_size=4", "max_new_tokens=6", "num_eval=4",
            "dtype=float32", "report_to=[]"]
ENTRIES = {"console_main": "from evotune.cli.main import console_main as entry",
           "main": "from evotune.cli.main import main as entry"}


def run_seconds(entry: str, model: str, output_dir: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one `train` in a fresh interpreter."""
    overrides = [word for setting in [f"model={model}", *SETTINGS] for word in ("--set", setting)]
    script = f"import sys\n{ENTRIES[entry]}\nsys.exit(entry(sys.argv[1:]))"
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    before = os.times()
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", script, "train", "--output-dir", output_dir, *overrides], env=environment,
                   capture_output=True, check=True)
    after = os.times()
    return time.perf_counter() - started, (after.children_user - before.children_user
                                           + after.children_system - before.children_system)


def main() -> None:
    from evotune.doctor import save_tiny_model

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", default=str(study_results("speed") / "startup_imports.json"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="evotune-startup-"))
    model = save_tiny_model(str(work / "model"))
    runs = {entry: [] for entry in ENTRIES}
    for repeat in range(args.repeats):  # alternating, so a slower stretch of the machine hits both arms
        for entry in ENTRIES:
            runs[entry].append(run_seconds(entry, str(model), str(work / f"{entry}-{repeat}")))
    result = {"command": "python -m bench.speed.startup_imports " + " ".join(sys.argv[1:]),
              "run": "evotune train on a tiny random Llama: " + ", ".join(SETTINGS),
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, OMP_NUM_THREADS=1",
              "python": platform.python_version(), "repeats": args.repeats}
    for entry, values in runs.items():
        result[entry] = {"wall_seconds": [round(wall, 2) for wall, _ in values],
                         "cpu_seconds": [round(cpu, 2) for _, cpu in values],
                         "median_wall_seconds": round(statistics.median(wall for wall, _ in values), 2),
                         "median_cpu_seconds": round(statistics.median(cpu for _, cpu in values), 2)}
    result["wall_speedup"] = round(
        result["main"]["median_wall_seconds"] / result["console_main"]["median_wall_seconds"], 2)
    result["cpu_saved_seconds"] = round(
        result["main"]["median_cpu_seconds"] - result["console_main"]["median_cpu_seconds"], 2)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

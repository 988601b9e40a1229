"""Does a CPU-second budget buy the same work beside a neighbour? The quickstart's own steps with `training_clock: cpu`,
alone and beside a busy neighbour (one core spinning in a Python loop), under OpenMP's default wait policy (idle
threads spin) and under OMP_WAIT_POLICY=PASSIVE, the policy `evotune` sets for a run whose budget counts CPU seconds
(cli/openmp.py: quiet_openmp_for_cpu_clock).

Each arm is `evotune train` with the shipped quickstart (only its iterations cut, no evaluation between them) in a
fresh process on all the machine's cores; its steps' CPU and wall seconds are read from metrics.jsonl (the first step
left out: it warms the caches). The default arm starts through main() with OMP_WAIT_POLICY unset, which is what every
run did before; the passive arm through the `evotune` command. The arms alternate, repeat by repeat.

    python -m bench.speed.omp_wait_policy --repeats 2     # -> bench/results/speed/omp_wait_policy.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import study_results, write_result

SETTINGS = ["training_clock=cpu", "iterations=4", "eval_every=0", "num_eval=8", "checkpoint_every=1000",
            "report_to=[]"]
ENTRIES = {"default (spin)": "from evotune.cli.main import main as entry",
           "passive (evotune's for training_clock: cpu)": "from evotune.cli.main import console_main as entry"}
NEIGHBOUR = "while True: pass"  # one core busy, as a second job on a shared machine


def steps(output_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    return [row for row in rows if "cpu_s" in row][1:]  # the first step warms the caches


def run_arm(entry: str, output_dir: Path, neighbour: bool) -> dict:
    script = f"import sys\n{ENTRIES[entry]}\nsys.exit(entry(sys.argv[1:]))"
    overrides = [word for setting in SETTINGS for word in ("--set", setting)]
    environment = {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}
    busy = subprocess.Popen([sys.executable, "-c", NEIGHBOUR]) if neighbour else None
    try:
        subprocess.run([sys.executable, "-c", script, "train", "--output-dir", str(output_dir), *overrides],
                       env={**environment, "HF_HUB_OFFLINE": "1"}, capture_output=True, check=True)
    finally:
        if busy:
            busy.kill()
            busy.wait()
    found = steps(output_dir)
    return {"cpu_s": statistics.median(row["cpu_s"] for row in found),
            "wall_s": statistics.median(row["time_s"] for row in found), "steps": len(found)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="evotune-omp-"))
    arms = {f"{entry}, {'beside a busy neighbour' if neighbour else 'alone'}": (entry, neighbour)
            for entry in ENTRIES for neighbour in (False, True)}
    runs: dict[str, list[dict]] = {name: [] for name in arms}
    for repeat in range(args.repeats):
        for index, (name, (entry, neighbour)) in enumerate(arms.items()):
            runs[name].append(run_arm(entry, work / f"{index}-{repeat}", neighbour))
    summary = {name: {"cpu_s_per_step": statistics.median(run["cpu_s"] for run in found),
                      "wall_s_per_step": statistics.median(run["wall_s"] for run in found), "runs": found}
               for name, found in runs.items()}
    ratios = {entry: {measure: round(summary[f"{entry}, beside a busy neighbour"][f"{measure}_per_step"]
                                     / summary[f"{entry}, alone"][f"{measure}_per_step"], 3)
                      for measure in ("cpu_s", "wall_s")} for entry in ENTRIES}
    write_result("omp_wait_policy", {
        "command": "python -m bench.speed.omp_wait_policy " + " ".join(sys.argv[1:]),
        "run": "evotune train (the quickstart) with " + ", ".join(SETTINGS),
        "arms": summary, "beside_a_neighbour_over_alone": ratios,
        "passive_over_default_alone": {measure: round(
            summary[f"{list(ENTRIES)[1]}, alone"][f"{measure}_per_step"]
            / summary[f"{list(ENTRIES)[0]}, alone"][f"{measure}_per_step"], 3) for measure in ("cpu_s", "wall_s")},
        "threads": os.cpu_count()}, study="speed")
    print(f"wrote {study_results('speed') / 'omp_wait_policy.json'}")


if __name__ == "__main__":
    main()

"""The speed probe's reference: `evotune doctor --speed`'s probe and the quickstart's wall time, one after the other on
this machine, into bench/results/quickstart/speed_reference.json (evotune.doctor.SPEED_REFERENCE quotes it).

    python -m bench.quickstart.speed_reference                     # probe, then `evotune train` (seed 0)
    python -m bench.quickstart.speed_reference --runs DIR --seed 1
    python -m bench.quickstart.speed_reference --name speed_check_NAME   # check the probe on another machine
    python -m bench.quickstart.speed_reference --from-run runs/quickstart_study/seed0   # a run.sh run's own pair

Each file also records what the probe predicted from the current reference (evotune.doctor.SPEED_REFERENCE) and
the measured time over that prediction: on the reference's own machine a check of run-to-run spread, on another
machine a check that the quickstart's time scales with the probe.

`--from-run` takes the pair bench/quickstart/run.sh recorded for one of its runs (the probe just before the run, and
the run's wall time, in its wall_time.json) instead of running the quickstart again.

The quickstart runs as a user runs it (`evotune train --output-dir DIR`, every core), timed from start to its
final/ model as bench/quickstart/run.sh times it; nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.common import write_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="runs/speed_reference", help="where the quickstart run goes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="speed_reference",
                        help="the result file's name; a name other than speed_reference leaves the reference as it is")
    parser.add_argument("--from-run", help="a bench/quickstart/run.sh run directory: its recorded probe and wall time")
    args = parser.parse_args()
    from evotune.doctor import SPEED_REFERENCE, expected_quickstart_seconds, speed_probe
    from evotune.runs.directory import read_run_config

    if args.from_run:
        timing = json.loads((Path(args.from_run) / "wall_time.json").read_text())
        measured, quickstart_s = timing["speed_probe"], timing["wall_time_s"]
        args.seed = read_run_config(Path(args.from_run))["seed"]
    else:
        measured = speed_probe()
        run = Path(args.runs) / f"seed{args.seed}"
        shutil.rmtree(run, ignore_errors=True)
        started = time.perf_counter()
        subprocess.run(["evotune", "train", "--output-dir", str(run), "--set", f"seed={args.seed}"], check=True,
                       env={**os.environ, "OMP_NUM_THREADS": str(os.cpu_count())})
        quickstart_s = round(time.perf_counter() - started, 1)
    predicted_s = round(expected_quickstart_seconds(measured["probe_s"]), 1)
    result = {"command": "python -m bench.quickstart.speed_reference " + " ".join(sys.argv[1:]),
              "probe": measured, "quickstart_s": quickstart_s, "seed": args.seed}
    if args.name != "speed_reference":  # a check against the reference; the reference itself predicts nothing
        result["prediction"] = {"reference": SPEED_REFERENCE, "predicted_s": predicted_s,
                                "measured_over_predicted": round(quickstart_s / predicted_s, 3)}
    write_result(args.name, result,
                 study="quickstart")


if __name__ == "__main__":
    main()

"""The speed probe's reference: `evotune doctor --speed`'s probe and the quickstart's wall time, one after the other on
this machine, into bench/results/quickstart/speed_reference.json (evotune.doctor.SPEED_REFERENCE quotes it).

    python -m bench.quickstart.speed_reference                     # probe, then `evotune train` (seed 0)
    python -m bench.quickstart.speed_reference --runs DIR --seed 1
    python -m bench.quickstart.speed_reference --name speed_check_NAME   # check the probe on another machine

Each file also records what the probe predicted from the current reference (evotune.doctor.SPEED_REFERENCE) and
the measured time over that prediction: on the reference's own machine a check of run-to-run spread, on another
machine a check that the quickstart's time scales with the probe.

The quickstart runs as a user runs it (`evotune train --output-dir DIR`, every core), timed from start to its
final/ model as bench/quickstart/run.sh times it; nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
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
    args = parser.parse_args()
    from evotune.doctor import SPEED_REFERENCE, expected_quickstart_seconds, speed_probe

    measured = speed_probe()
    run = Path(args.runs) / f"seed{args.seed}"
    shutil.rmtree(run, ignore_errors=True)
    started = time.perf_counter()
    subprocess.run(["evotune", "train", "--output-dir", str(run), "--set", f"seed={args.seed}"], check=True,
                   env={**os.environ, "OMP_NUM_THREADS": str(os.cpu_count())})
    quickstart_s = round(time.perf_counter() - started, 1)
    predicted_s = round(expected_quickstart_seconds(measured["probe_s"]), 1)
    write_result(args.name, {"command": "python -m bench.quickstart.speed_reference " + " ".join(sys.argv[1:]),
                             "probe": measured, "quickstart_s": quickstart_s, "seed": args.seed,
                             "prediction": {"reference": SPEED_REFERENCE, "predicted_s": predicted_s,
                                            "measured_over_predicted": round(quickstart_s / predicted_s, 3)}},
                 study="quickstart")


if __name__ == "__main__":
    main()

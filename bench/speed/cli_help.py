"""The command line's answers that run nothing (`--help`, a command's `--help`, `--print-config`), this checkout
against an earlier commit's, side by side in one run.

Each repeat starts every command twice, alternating between the two checkouts (a slower stretch of the machine hits
both), in a fresh interpreter with PYTHONPATH set to that checkout's `src/`; the figure is the median wall time and
the peak resident memory of the process, and the ratio is taken repeat by repeat.

    git worktree add /tmp/before b7b33ca
    python -m bench.speed.cli_help --before /tmp/before --repeats 5   # -> bench/results/speed/cli_help.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import write_result

ROOT = Path(__file__).resolve().parents[2]  # this checkout

COMMANDS = [["--help"], ["train", "--help"], ["train", "--print-config"]]


def environment(checkout: Path) -> dict[str, str]:
    """This process's environment with CHECKOUT's evotune first on the path, at one thread."""
    return {**os.environ, "PYTHONPATH": str(checkout / "src"), "OMP_NUM_THREADS": "1"}


def run_once(checkout: Path, arguments: list[str]) -> float:
    """Wall seconds of `python -m evotune.cli.main ARGUMENTS` on CHECKOUT's src/ (it must succeed)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "evotune.cli.main", *arguments], env=environment(checkout),
                   capture_output=True, check=True, cwd=checkout)
    return time.perf_counter() - started


def peak_mib(checkout: Path, arguments: list[str]) -> float:
    """Peak RSS (MiB) of one such process, in a process of its own so that no other child's peak counts."""
    script = ("import os, resource, subprocess, sys\n"
              "subprocess.run(sys.argv[1:], check=True, capture_output=True)\n"
              "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    done = subprocess.run([sys.executable, "-c", script, sys.executable, "-m", "evotune.cli.main", *arguments],
                          env=environment(checkout), capture_output=True, text=True, check=True, cwd=checkout)
    return int(done.stdout.split()[-1]) / 1024  # ru_maxrss is in KiB on Linux


def commit_of(checkout: Path) -> str:
    return subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="a checkout of the earlier commit (a worktree)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--name", default="cli_help")
    args = parser.parse_args()
    checkouts = {"this": ROOT, "before": args.before.resolve()}
    rows = []
    for arguments in COMMANDS:
        for checkout in checkouts.values():
            run_once(checkout, arguments)  # a warm-up: the bytecode and the page cache as a user's second call
        seconds: dict[str, list[float]] = {name: [] for name in checkouts}
        for _ in range(args.repeats):
            for name, checkout in checkouts.items():
                seconds[name].append(run_once(checkout, arguments))
        ratios = [this / before for this, before in zip(seconds["this"], seconds["before"])]
        rows.append({"command": "evotune " + " ".join(arguments),
                     "wall_s_median": {name: round(statistics.median(values), 3) for name, values in seconds.items()},
                     "wall_s": {name: [round(value, 3) for value in values] for name, values in seconds.items()},
                     "this_over_before_median": round(statistics.median(ratios), 3),
                     "peak_rss_mib": {name: round(peak_mib(checkout, arguments), 1)
                                      for name, checkout in checkouts.items()}})
    write_result(args.name, {"command": "python -m bench.speed.cli_help " + " ".join(sys.argv[1:]),
                             "commits": {name: commit_of(checkout) for name, checkout in checkouts.items()},
                             "rows": rows}, "speed")


if __name__ == "__main__":
    main()

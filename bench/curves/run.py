"""The learning-curve runs: every arm x seed of arms.py, one after another on THREADS threads, each to its budget of
CPU seconds (`training_clock: cpu`), resumed where a session stopped it (its run directory holds a checkpoint and no
final/). Run it from its own worktree at a fixed commit, in the background; nothing else it times bends a curve,
since every run counts its own process tree's CPU seconds.

    python -m bench.curves.run --runs /work/curves_runs            # the study (about 9 hours on 2 cores)
    python -m bench.curves.run --runs /work/curves_runs --plan     # the runs, done or missing
    touch /tmp/evotune_curves.stop                                  # stop after the run in progress

Each finished run writes bench/results/curves/runs/ARM_seedN.json (no weights): its steps' cumulative CPU and wall
seconds, the speed probe taken before it and the machine; an ES run also keeps its config and update log under
replay/ARM_seedN/, from which `score.py` replays its model at every mark (in this session or a later one).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from bench.method_matrix.arms import METHODS
from bench.method_matrix.commands import records, run_command, write_config
from bench.method_matrix.job import machine
from bench.scaling.run import speed_probe

from .arms import ARMS, CPU_SECONDS, MARK_EVERY, RESULTS, SEEDS, THREADS, arm_keys, marks


def run_one(arm: str, seed: int, runs: Path, results: Path) -> Path:
    folder = runs / arm / f"seed{seed}"
    keys, source = arm_keys(arm, seed)
    command = METHODS[arm]["command"]
    config = write_config(folder.parent / f"seed{seed}_config", keys)
    resume = (folder / "config.yaml").is_file() and not (folder / "final").exists()
    os.environ["OMP_NUM_THREADS"] = str(THREADS)  # the run's and the probe's (its process inherits it)
    probe = speed_probe("float32")  # this machine's speed, before the run (the x axis is CPU seconds, not the machine)
    arguments = [command, str(config), "--output-dir", str(folder)] + (["--resume"] if resume else [])
    timing = run_command(arguments, folder.parent / f"seed{seed}.log")
    steps = [record for record in records(folder) if "cpu_s" in record]
    cpu, wall, cumulative = 0.0, 0.0, []
    for record in steps:
        cpu, wall = cpu + record["cpu_s"], wall + record["time_s"]
        cumulative.append({"iteration": record["iteration"], "cpu_s": round(cpu, 2), "wall_s": round(wall, 2)})
    result = {"arm": arm, "label": METHODS[arm]["label"], "seed": seed, "setting_source": source, "keys": keys,
              "cpu_budget_s": CPU_SECONDS, "mark_every_s": MARK_EVERY, "marks": marks(), "threads": THREADS,
              "steps": cumulative, "resumed": resume, "last_process": timing, "speed_probe": probe,
              "machine": machine(), "run": str(folder)}
    if command == "train":
        result["replay"] = keep_replay(folder, results / "replay" / f"{arm}_seed{seed}")
    path = results / "runs" / f"{arm}_seed{seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path


def keep_replay(folder: Path, kept: Path) -> str:
    """An ES run's model at every mark, kept in the results: its config and its update log (seeds and coefficients,
    about 100 KB, against the 400 MB of its checkpoint's weights), from which score.py replays the mean exactly; a
    run scored in a later session, or by a reader, needs nothing of its run directory."""
    kept.mkdir(parents=True, exist_ok=True)
    for source in (folder / "config.yaml", folder / "checkpoint" / "updates.json"):
        shutil.copyfile(source, kept / source.name)
    return str(kept.relative_to(kept.parents[1]))  # replay/ARM_seedN, under the curves' results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, required=True, help="where the run directories go (never committed)")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--arms", nargs="*", default=ARMS)
    parser.add_argument("--seeds", nargs="*", type=int, default=SEEDS)
    parser.add_argument("--plan", action="store_true")
    parser.add_argument("--stop-file", type=Path, default=Path("/tmp/evotune_curves.stop"))
    args = parser.parse_args()
    for seed in args.seeds:  # seed by seed: a short session leaves every arm with the same seeds done
        for arm in args.arms:
            done = (args.results / "runs" / f"{arm}_seed{seed}.json").is_file()
            if args.plan:
                print(("done    " if done else "missing ") + f"{arm} seed {seed}")
                continue
            if done:
                continue
            if args.stop_file.exists():
                print(f"curves: {args.stop_file} exists: stopped before {arm} seed {seed}", flush=True)
                return
            print(f"curves: {arm} seed {seed} ({time.strftime('%H:%M')})", flush=True)
            print(f"curves: wrote {run_one(arm, seed, args.runs, args.results)}", flush=True)


if __name__ == "__main__":
    main()

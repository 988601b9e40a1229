"""The method matrix, one command: every method tuned alike on a validation split, then run on every seed of
every task at equal wall time, one CPU thread per run, two runs at a time. It runs only what is missing (a job's
result file is its only mark of being done), so a study stopped midway loses at most the jobs in flight; each
finished job's small result file is committed at once when --commit is given. An SFT's weights from an earlier
session are made again and checked before the runs that start from them (restore.py).

    python -m bench.method_matrix.run --results bench/results/method_matrix --runs /tmp/study_runs --commit
    python -m bench.method_matrix.run --plan          # list the jobs and which are done (any machine)
    python -m bench.method_matrix.run --only memory/  # the memory probes alone: on any machine type (their CPU named)
    python -m bench.method_matrix.run --step-matched  # on another machine type: main runs at the study's steps
    touch RESULTS/PAUSE                               # start no new job until the file is gone

Order: the held-out scores measured before measure.py's budgets grew, measured again (rescore/), then the
tuning runs (arithmetic, TUNING_SEED), the base model's held-out scores, then per method, once its
tuning is complete, its main runs with the best validation setting (arithmetic seeds, then countdown's, each
from the same SFT warm start on countdown), each 2-digit addition main run scored before the transfer split
existed trained again with its own setting and seed (transfer/main/: its weights are gone, and the transfer column
reads the rerun's two scores together), then short memory probes (peak memory of each method's process
in the study's dtype, GRPO with and without gradient accumulation, ES with and without its drift-base copy).
Run it from a fixed commit (a git worktree), with that worktree's src/ first on PYTHONPATH: each result file
records the commit it ran.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import commit_file, cpu_facts

from .arms import (
    MEMORY_PROBES,
    METHODS,
    TASKS,
    THREADS,
    TRANSFER_TASK,
    TUNING_SEED,
    TUNING_SETTINGS,
    main_path,
    rerun_path,
)
from .job import PROBE_SOURCE
from .restore import with_restores

ROOT = Path(__file__).resolve().parents[2]


def selection(results: Path, method: str) -> int | None:
    """The tuning setting with the best final validation accuracy (the first on a tie); None until all ran."""
    scores = []
    for setting in range(TUNING_SETTINGS):
        path = results / "tune" / "arithmetic" / method / f"s{setting}_seed{TUNING_SEED}.json"
        if not path.exists():
            return None
        scores.append(json.loads(path.read_text())["training"]["validation_after"])
    return max(range(TUNING_SETTINGS), key=lambda index: (scores[index], -index))


def plan(results: Path, step_matched: bool = False, training_clock: str = "wall") -> list[dict]:
    """Every job in the order it should run; `needs` lists result files that must exist first. With `step_matched`
    (a run on another machine type than the study's), each main run carries the steps it is to take; with
    `training_clock: cpu`, every training job counts its budget in its own CPU seconds."""
    jobs: list[dict] = []
    finished = functools.cache(functools.partial(read_finished, results))  # rescores and reruns read the same files
    sft_tune = f"warm_start/arithmetic/sft_seed{TUNING_SEED}.json"
    jobs.append({"kind": "sft", "task": "arithmetic", "seed": TUNING_SEED, "path": sft_tune, "needs": []})
    for setting in range(TUNING_SETTINGS):
        for method in METHODS:
            needs = [sft_tune] if method == "essa" else []
            jobs.append({"kind": "train", "phase": "tune", "task": "arithmetic", "method": method,
                         "setting": setting, "seed": TUNING_SEED, "needs": needs,
                         "path": f"tune/arithmetic/{method}/s{setting}_seed{TUNING_SEED}.json"})
    jobs.append({"kind": "base", "task": "arithmetic", "path": "base/arithmetic.json", "needs": []})
    # the base model's scores measured again with the transfer split, which its first file predates
    jobs.append({"kind": "transfer", "task": "arithmetic", "of": {"kind": "base", "task": "arithmetic"},
                 "needs": ["base/arithmetic.json"], "path": "transfer/base/arithmetic.json"})
    for task, spec in TASKS.items():
        for seed in spec["seeds"]:
            sft = f"warm_start/{task}/sft_seed{seed}.json"
            if spec["warm_start"] or "essa" in METHODS:
                jobs.append({"kind": "sft", "task": task, "seed": seed, "path": sft, "needs": []})
            for method in METHODS:
                chosen = selection(results, method)
                tuned = [f"tune/arithmetic/{method}/s{index}_seed{TUNING_SEED}.json" for index in
                         range(TUNING_SETTINGS)]
                needs = tuned + ([sft] if spec["warm_start"] or method == "essa" else [])
                jobs.append({"kind": "train", "phase": "main", "task": task, "method": method,
                             "setting": chosen, "seed": seed, "needs": needs,
                             "path": main_path(task, method, seed)})
                if step_matched:
                    jobs[-1]["step_matched"] = matched_steps(results, task, method)
    for rerun in reruns(finished, jobs):
        if step_matched:  # a rerun matches its arm's reruns (they trained on a later commit, at other steps)
            rerun["step_matched"] = matched_steps(results, rerun["task"], rerun["method"], folder="transfer/main")
        jobs.append(rerun)
    for task, spec in TASKS.items():  # ESSA's SFT alone, where ESSA is the only arm that starts from it
        if "essa" in METHODS and not spec["warm_start"]:
            for seed in spec["seeds"]:
                jobs.append({"kind": "sft_alone", "task": task, "seed": seed,
                             "path": f"{SFT_ALONE}{task}/seed{seed}.json",
                             "needs": [f"warm_start/{task}/sft_seed{seed}.json"]})
    for method, variant in MEMORY_PROBES:
        tuned = [f"tune/arithmetic/{method}/s{index}_seed{TUNING_SEED}.json" for index in range(TUNING_SETTINGS)]
        sft = [f"warm_start/arithmetic/sft_seed{TUNING_SEED}.json"] if method == "essa" else []
        jobs.append({"kind": "memory", "task": "arithmetic", "method": method, "variant": variant,
                     "setting": selection(results, method), "seed": TUNING_SEED, "needs": tuned + sft,
                     "path": f"memory/{method}_{variant}.json"})
    for job in jobs:
        if job["kind"] == "train" and training_clock != "wall":
            job["training_clock"] = training_clock
        if job.get("method") == "essa" and job["task"] == "arithmetic":
            job["sft_result"] = str(results / f"warm_start/arithmetic/sft_seed{job['seed']}.json")
    return rescores(finished, jobs) + jobs


def read_finished(results: Path, path: str) -> dict | None:
    """A job's result file, or None while it has not finished."""
    file = results / path
    return json.loads(file.read_text()) if file.is_file() else None


def reruns(finished: Callable[[str], dict | None], jobs: list[dict]) -> list[dict]:
    """A main run on the task with a transfer split that was scored before the split existed, trained again (its
    setting, seed and budget; its weights are gone) and scored in the template and past it, into transfer/main/: its
    first file stays as it is, and the transfer column reads the rerun's two scores together, never one run's
    template score beside another's transfer score."""
    again = []
    for job in jobs:
        if job.get("phase") != "main" or job["task"] != TRANSFER_TASK:
            continue
        recorded = finished(job["path"])
        if recorded is None or "transfer" in recorded.get("heldout", {}):
            continue
        starts = [need for need in job["needs"] if need.startswith("warm_start/")]  # ESSA's SFT: restored if gone
        setting = recorded.get("job", {}).get("setting", job["setting"])  # the setting the first run trained with
        again.append({**job, "phase": "rerun", "setting": setting, "needs": [job["path"], *starts],
                      "path": rerun_path(job["task"], job["method"], job["seed"])})
    return again


def matched_steps(results: Path, task: str, method: str, folder: str = "main") -> dict | None:
    """Equal work on another machine type: the median of the steps this arm's finished seeds took on the study's
    machine type (at equal time there), rounded, and the files it is read from; None while no seed has finished.
    `folder` is where the seeds are read: `main` for a main run, `transfer/main` for a rerun (run.py's reruns)."""
    recorded = json.loads((results / "machine.json").read_text())
    steps, files = [], []
    for file in sorted((results / folder / task / method).glob("seed*.json")):
        data = json.loads(file.read_text())
        ran_on = {"cpu": data["machine"]["cpu"], "amx_bf16": data["machine"]["amx_bf16"]}
        if "step_matched" not in data["training"] and ran_on == {key: recorded[key] for key in ran_on}:
            steps.append(data["training"]["steps"])
            files.append(file.relative_to(results).as_posix())
    if not steps:
        return None
    return {"steps": round(statistics.median(steps)), "median_of": steps, "files": files}


def rescores(finished: Callable[[str], dict | None], jobs: list[dict]) -> list[dict]:
    """A job measuring again each finished held-out score that was read at another budget than measure.py's."""
    from .measure import SCORED_BUDGET

    again = []
    for job in jobs:
        recorded = finished(job["path"]) if job["kind"] in ("base", "train") else None
        if recorded is None:
            continue
        heldout = recorded.get("heldout")
        if heldout and heldout["scored_budget"] != SCORED_BUDGET:
            measured = {key: value for key, value in job.items() if key not in ("path", "needs")}
            again.append({"kind": "rescore", "task": job["task"], "of": measured, "needs": [job["path"]],
                          "path": f"rescore/{job['path']}"})
    return again


def is_grpo(path: str) -> bool:
    return "/grpo_" in path or path.startswith("memory/grpo_")


def next_job(ready: list[dict], running: list[str]) -> dict | None:
    """The first ready job that may start beside the running ones: at most one GRPO job at a time (two GRPO
    processes at 48 tokens, ~11 GiB each, were killed for memory on a 24 GiB machine)."""
    grpo_running = any(is_grpo(path) for path in running)
    return next((job for job in ready if not (grpo_running and is_grpo(job["path"]))), None)


def machine_type() -> dict:
    """What makes two machines one machine type for the study: the CPU model, its AMX bfloat16 flag, the cores."""
    facts = cpu_facts()
    return {"cpu": facts["cpu"], "amx_bf16": facts["amx_bf16"], "cores": os.cpu_count()}


def machine_mismatch(results: Path, here: dict) -> str | None:
    """Why this machine may not run the study's jobs (another machine type than machine.json's), or None."""
    path = results / "machine.json"
    recorded = json.loads(path.read_text()) if path.exists() else here
    if recorded == here:
        return None
    return (f"method_matrix: this machine ({here}) is not the study's machine type ({recorded}); finish the study "
            "on that type, or start it over in another --results folder.")


# Jobs whose result does not hang on the CPU's speed: a memory probe runs 2 steps, whatever their seconds, in the
# study's dtype and threads, and its file names its CPU (the page names it too, with the same SFT's peak on both).
# An SFT alone's measurement (greedy answers of weights made in a fixed number of steps) does not hang on it either.
ANY_MACHINE_PREFIX = "memory/"
SFT_ALONE = "sft_alone/"
UNTIMED = (ANY_MACHINE_PREFIX, SFT_ALONE)
OTHER_TYPE_ADVICE = (f" The memory probes and the SFTs alone may run here (--only {' '.join(UNTIMED)}), and the main "
                     "runs at equal work (--step-matched: the steps of the arm's finished seeds on the study's machine "
                     "type).")


def check_machine(results: Path, commit_it: bool, only: list[str] | None = None, step_matched: bool = False) -> bool:
    """The study runs on one machine type: the first run recorded it, later ones (other sessions) must match, except
    for a run of the memory probes alone (`--only memory/`) or one at equal work (`--step-matched`). True when this
    machine is of another type (and may run only those)."""
    path = results / "machine.json"
    here = machine_type()
    if not path.exists():
        path.write_text(json.dumps(here, indent=1) + "\n")
        if commit_it:
            commit_file(path, "method matrix: the study's machine type", "method_matrix")
        return False
    mismatch = machine_mismatch(results, here)
    if mismatch is None:
        if step_matched:
            raise SystemExit("method_matrix: this is the study's machine type; its runs take equal time here, run "
                             "without --step-matched")
        return False
    if not step_matched and not (only and all(prefix.startswith(UNTIMED) for prefix in only)):
        raise SystemExit(mismatch + OTHER_TYPE_ADVICE)
    return True


def runs_here(job: dict, other_type: bool) -> bool:
    """Whether a job may run on this machine: any on the study's type; on another, a memory probe, an SFT's
    measurement alone, or a main run whose steps are matched (an SFT, a tuning run or a main run with no finished
    seed to match waits)."""
    return not other_type or job["path"].startswith(UNTIMED) or bool(job.get("step_matched"))


def launch(job: dict, results: Path, runs: Path, log_dir: Path, probe_source: Path) -> subprocess.Popen:
    environment = {**os.environ, "OMP_NUM_THREADS": str(THREADS), "MKL_NUM_THREADS": str(THREADS),
                   "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", PROBE_SOURCE: str(probe_source)}
    source = str(ROOT / "src")  # this checkout's evotune, not another one installed in editable mode
    environment["PYTHONPATH"] = source + os.pathsep + str(ROOT) + (
        os.pathsep + environment["PYTHONPATH"] if environment.get("PYTHONPATH") else "")
    log = log_dir / (job["path"].replace("/", "__") + ".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    payload = {key: value for key, value in job.items() if key != "needs"}
    return subprocess.Popen([sys.executable, "-m", "bench.method_matrix.job", json.dumps(payload), "--results",
                             str(results), "--runs", str(runs)], cwd=ROOT, env=environment,
                            stdout=log.open("w"), stderr=subprocess.STDOUT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results" / "method_matrix")
    parser.add_argument("--runs", type=Path, default=Path("/tmp/method_matrix_runs"))
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--commit", action="store_true", help="commit each finished job's result file")
    parser.add_argument("--plan", action="store_true", help="print the jobs and whether each is done, then exit")
    parser.add_argument("--only", nargs="*", default=None, help="run only jobs whose result path starts so")
    parser.add_argument("--probe-src", type=Path, default=ROOT / "src",
                        help="the src/ whose `evotune doctor --speed` probe each main run records (the study's own "
                             "src/ predates the probe: give a current checkout's)")
    parser.add_argument("--step-matched", action="store_true",
                        help="on another machine type than the study's: run each main run for the median steps of "
                             "its arm's finished seeds on the study's type (equal work, not equal time)")
    parser.add_argument("--training-clock", choices=["wall", "cpu"], default="wall",
                        help="what a run's budget counts: wall seconds (the study's first arms), or the run's own "
                             "CPU seconds, which a neighbour's load or a pause (SIGSTOP) does not eat; a one-thread "
                             "run alone spends the two alike. Each result file records the clock among its keys")
    args = parser.parse_args()
    results = args.results.resolve()
    results.mkdir(parents=True, exist_ok=True)
    if args.plan:  # reads only: on any machine, saying whether this one may run the missing jobs
        jobs = plan(results)
        for job in jobs:
            print(("done    " if (results / job["path"]).exists() else "missing ") + job["path"])
        waiting = [job for job in jobs if not (results / job["path"]).exists()]
        for restore in with_restores(waiting, results, args.runs, skip=set()):
            if restore["kind"] == "restore":
                print(f"restore {restore['needs'][0]}: its weights are not under {args.runs}; made again and "
                      "checked before the runs that start from it")
        mismatch = machine_mismatch(results, machine_type())
        print(mismatch + OTHER_TYPE_ADVICE if mismatch else "this machine is the study's machine type")
        return
    other_type = check_machine(results, args.commit, args.only, args.step_matched)
    running: dict[str, subprocess.Popen] = {}
    failed: set[str] = set()
    while True:
        for path, process in list(running.items()):
            if process.poll() is None:
                continue
            del running[path]
            if process.returncode == 0 and (results / path).exists():
                print(f"method_matrix: done {path}", flush=True)
                if args.commit:
                    commit_file(results / path, f"method matrix: {path}", "method_matrix")
            else:
                failed.add(path)
                print(f"method_matrix: FAILED {path} (exit {process.returncode}); see its log", flush=True)
        every = plan(results, step_matched=other_type, training_clock=args.training_clock)
        missing = [job for job in every if not (results / job["path"]).exists()
                   and job["path"] not in failed
                   and (args.only is None or any(job["path"].startswith(prefix) for prefix in args.only))]
        jobs = [job for job in missing if runs_here(job, other_type)]
        ready = [job for job in jobs if job["path"] not in running and all((results / need).exists()
                                                                           for need in job["needs"])
                 and job.get("setting", 0) is not None]
        ready = with_restores(ready, results, args.runs, skip=set(running) | failed)
        if not jobs and not running:
            elsewhere = f"; {len(missing)} wait for the study's machine type" if missing else ""
            print("method_matrix: every job is done" + (f" but {len(failed)} failed" if failed else "") + elsewhere,
                  flush=True)
            return
        if not ready and not running:
            print(f"method_matrix: {len(jobs)} jobs wait on failed ones: {sorted(failed)}", flush=True)
            return
        paused = (results / "PAUSE").exists()
        while len(running) < args.parallel and not paused:
            job = next_job(ready, list(running))
            if job is None:
                break
            ready.remove(job)
            print(f"method_matrix: start {job['path']}", flush=True)
            running[job["path"]] = launch(job, results, args.runs, args.runs / "logs", args.probe_src.resolve())
        time.sleep(5)


if __name__ == "__main__":
    main()

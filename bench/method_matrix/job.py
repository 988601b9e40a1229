"""One job of the method matrix, in its own process at one thread: a warm start, a base measurement, or a
training run (tuning or main) with its measurement; it writes one small result file (no weights).

    python -m bench.method_matrix.job '{"kind": "train", "phase": "tune", "task": "arithmetic", ...}' \
        --results bench/results/method_matrix --runs /work/study_runs
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import cpu_facts

from .arms import ADAPTER_METHODS, DTYPE, METHODS, MODEL, TASKS, THREADS, TRAINING_SECONDS, run_keys
from .commands import records, run_command, sft_and_merge, sft_folder, write_config

# The checkout whose `evotune.doctor.speed_probe` times this machine beside a timed job (run.py's --probe-src): the
# study's own src/ predates the probe, and the probe measures the machine, not the study's code.
PROBE_SOURCE = "METHOD_MATRIX_PROBE_SRC"


def machine() -> dict[str, Any]:
    import platform

    import torch

    import evotune

    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(evotune.__file__).parent, capture_output=True,
                            text=True).stdout.strip()
    return {**cpu_facts(), "threads": torch.get_num_threads(), "dtype": DTYPE,
            "torch": torch.__version__, "python": platform.python_version(), "evotune_commit": commit,
            "date": time.strftime("%Y-%m-%d %H:%M")}


def warm_start(job: dict, runs: Path) -> dict[str, Any]:
    """The SFT warm start (sft_and_merge). On a warm-start task the merged model is every method's start, so its
    held-out record is kept beside the training's, where the pages read a start's (a main run's "heldout")."""
    run, training = sft_and_merge(job, runs)
    payload = {"training": training}
    if TASKS[job["task"]]["warm_start"]:
        from .measure import measure

        merged = str(run / "merged")
        payload["heldout"] = measure(merged, job["task"], merged, job["seed"])
    return payload


def base(job: dict) -> dict[str, Any]:
    from .measure import measure

    return {"heldout": measure(MODEL, job["task"], MODEL, 0)}


def sft_alone(job: dict, runs: Path) -> dict[str, Any]:
    """An SFT warm start alone, scored like every arm (held-out accuracy at the scored budget, retention and KL to
    the base model): on a task where only ESSA starts from it, ESSA's row minus this one is what its evolution added."""
    from .measure import measure

    return {"heldout": measure(str(sft_folder(runs, job["task"], job["seed"]) / "merged"), job["task"], MODEL,
                               job["seed"])}


def start_of(job: dict, runs: Path) -> tuple[dict[str, Any], float]:
    """The model (or adapter) a run starts from, and the seconds of SFT charged to it."""
    task, method, seed = job["task"], job["method"], job["seed"]
    sft = sft_folder(runs, task, seed)
    if TASKS[task]["warm_start"]:
        if method in ADAPTER_METHODS:
            return {"adapter": str(sft / "adapter")}, 0.0
        return {"model": str(sft / "merged")}, 0.0
    if method == "essa":
        sft_result = json.loads(Path(job["sft_result"]).read_text())
        return {"adapter": str(sft / "adapter")}, sft_result["training"]["training_seconds"]
    return {}, 0.0


def speed_probe() -> dict[str, Any]:
    """`evotune doctor --speed`'s probe (one quickstart generate, median of 3) at the job's threads and dtype, run from
    the checkout named by METHOD_MATRIX_PROBE_SRC (its commit recorded): how fast this machine was for the job."""
    source = os.environ.get(PROBE_SOURCE)
    if not source:
        raise RuntimeError(f"{PROBE_SOURCE} is not set: run jobs through bench.method_matrix.run (--probe-src)")
    code = ("import json; from evotune.doctor import speed_probe; "
            f"print(json.dumps(speed_probe(model={MODEL!r}, dtype={DTYPE!r})))")
    environment = {**os.environ, "OMP_NUM_THREADS": str(THREADS), "MKL_NUM_THREADS": str(THREADS),
                   "PYTHONPATH": source}
    done = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the speed probe from {source} failed:\n{done.stderr[-3000:]}")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=source, capture_output=True, text=True).stdout.strip()
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "evotune_commit": commit}


def train_keys(job: dict, start: dict[str, Any], charged: float) -> dict[str, Any]:
    """One training job's config keys: its arm's setting, its warm start, and its budget (the study's seconds less
    what the SFT spent; or, on another machine type, the study's steps; in CPU seconds where the job says so)."""
    method = METHODS[job["method"]]
    keys = {**run_keys(job["method"], job["task"], method["grid"][job["setting"]], job["seed"], job["phase"]), **start}
    if method["command"] == "grpo" and "adapter" in start:
        keys["lora"] = True
    matched = job.get("step_matched")
    if matched:  # another machine type: the study's steps (equal work), with no limit on their time
        keys.update(iterations=matched["steps"], max_training_seconds=0.0)
    else:
        # what the SFT left of the budget; where it took all of it (a dry run's seconds) the run still takes its
        # first step, and the result records the seconds actually spent
        keys["max_training_seconds"] = max(round(TRAINING_SECONDS - charged, 1), 0.001)
    if job.get("training_clock", "wall") != "wall":
        # a one-thread run alone spends its wall seconds as CPU seconds; counted in CPU seconds, a run that a
        # neighbour slows (or that is paused) still gets its whole budget of work (run.py --training-clock)
        keys["training_clock"] = job["training_clock"]
    return keys


def train(job: dict, runs: Path) -> dict[str, Any]:
    method = METHODS[job["method"]]
    run = runs / job["task"] / job["phase"] / f"{job['method']}_s{job['setting']}_seed{job['seed']}"
    start, charged = start_of(job, runs)
    keys = train_keys(job, start, charged)
    matched = job.get("step_matched")
    probe = speed_probe() if job["phase"] != "tune" else None
    command = "grpo" if method["command"] == "grpo" else "train"
    config = write_config(run, keys)
    cost = run_command([command, str(config), "--output-dir", str(run)], run.parent / f"{run.name}.log")
    lines = records(run)
    steps = [r for r in lines if "time_s" in r and "reward_mean" in r]
    evals = [r["eval/accuracy"] for r in lines if "eval/accuracy" in r]
    if not steps or len(evals) < 2:
        raise RuntimeError(f"{run}: {len(steps)} training steps and {len(evals)} evaluations logged; expected both")
    elapsed, curve = 0.0, []
    for r in steps:
        elapsed += r["time_s"]
        curve.append([round(charged + elapsed, 2), round(r["reward_mean"], 4)])
    result = {"keys": keys, "sft_seconds_charged": charged, "steps": len(steps),
              "training_seconds": round(charged + elapsed, 1), "validation_before": evals[0],
              "validation_after": evals[-1], "reward_curve": curve, **cost}
    if matched:
        result["step_matched"] = matched
    result = {"training": result, **({"speed_probe": probe} if probe else {})}
    if job["phase"] != "tune":
        from .measure import measure

        result["heldout"] = measure(str(run), job["task"], start_model(job, start, runs), job["seed"])
    return result


def start_model(job: dict, start: dict[str, Any], runs: Path) -> str:
    """The model a run's gains are measured against: its start's model, else the seed's merged SFT on a warm-start
    task, else the base model (an adapter run starts from the base or its SFT's adapter)."""
    if start.get("model"):
        return start["model"]
    return str(sft_folder(runs, job["task"], job["seed"]) / "merged") if TASKS[job["task"]]["warm_start"] else MODEL


def rescore(job: dict, runs: Path) -> dict[str, Any]:
    """The held-out accuracy of a finished job's model measured again at measure.py's budgets (a result measured
    before they grew); retention stays the original file's, read at the same budget as before."""
    from .measure import measure

    measured = job["of"]
    if measured["kind"] == "base":
        model = start = MODEL
    else:
        model = str(runs / measured["task"] / measured["phase"]
                    / f"{measured['method']}_s{measured['setting']}_seed{measured['seed']}")
        start = start_model(measured, start_of(measured, runs)[0], runs)
    return {"heldout": measure(model, measured["task"], start, measured.get("seed", 0), with_retention=False)}


def memory(job: dict, runs: Path) -> dict[str, Any]:
    """Peak resident memory of 2 steps of a method's run (its process alone, model load and evaluation included),
    and the sizes of the copies of the weights it keeps, from the parameter count."""
    from .arms import memory_keys

    method = METHODS[job["method"]]
    run = runs / "memory" / f"{job['method']}_{job['variant']}"
    start, _ = start_of({**job, "task": "arithmetic"}, runs)
    keys = {**memory_keys(job["method"], method["grid"][job["setting"]], job["variant"]), **start}
    if method["command"] == "grpo" and "adapter" in start:
        keys["lora"] = True
    config = write_config(run, keys)
    command = "grpo" if method["command"] == "grpo" else "train"
    cost = run_command([command, str(config), "--output-dir", str(run)], run.parent / f"{run.name}.log")
    return {"keys": keys, "variant": job["variant"], **cost, "weights": weight_copies(job["method"], keys)}


def weight_copies(method: str, keys: dict[str, Any]) -> dict[str, float]:
    """MiB of each copy of the model's weights the method holds besides activations, for SmolLM2-135M
    (134,515,008 parameters; float32 here): the model itself; full-es's fp32 master of the mean (exact restore)
    and, with log_drift, its fp32 copy of the starting weights; grpo-full's gradients and AdamW's two
    moments; LoRA methods' adapter is small (rank 8 on q/k/v/o: 1.7M parameters)."""
    parameters = 134_515_008
    weights = parameters * 4 / 2**20
    copies = {"model_weights": round(weights, 1)}
    if method in ("full_es", "lowrank"):
        copies["fp32_master_of_the_mean"] = round(weights, 1)
        if keys.get("log_drift"):
            copies["fp32_drift_base"] = round(weights, 1)
    if method == "grpo_full":
        copies.update(gradients=round(weights, 1), adamw_moments=round(2 * weights, 1))
    return copies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("job", type=json.loads)
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--runs", type=Path, required=True)
    args = parser.parse_args()
    job = args.job
    started = time.perf_counter()
    if job["kind"] == "sft":
        payload = warm_start(job, args.runs)
    elif job["kind"] == "base":
        payload = base(job)
    elif job["kind"] in ("rescore", "transfer"):  # transfer: the base model measured again with the transfer split
        payload = rescore(job, args.runs)
    elif job["kind"] == "restore":
        from .restore import restore

        payload = {"restored": restore(job, args.runs)}
    elif job["kind"] == "memory":
        payload = {"memory": memory(job, args.runs)}
    elif job["kind"] == "sft_alone":
        payload = sft_alone(job, args.runs)
    else:
        payload = train(job, args.runs)
    output = args.results / job["path"]
    output.parent.mkdir(parents=True, exist_ok=True)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    payload = {"job": {key: value for key, value in job.items() if key not in ("path", "sft_result")},
               **payload, "job_wall_s": round(time.perf_counter() - started, 1),
               "measure_peak_rss_mib": round(usage.ru_maxrss / 1024, 1), "machine": machine()}
    if "method" in job:
        payload["label"] = METHODS[job["method"]]["label"]
        payload["setting"] = METHODS[job["method"]]["grid"][job["setting"]]
    tmp = output.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    tmp.replace(output)


if __name__ == "__main__":
    main()

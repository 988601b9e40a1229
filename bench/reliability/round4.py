"""Reliability, round 4: the cases of that round (cluster addresses, pools sized to the machine, one writer per run
directory, memory faults, and three wordings), tried against the real CLI (and the Python API) with a tiny random
model and loopback addresses only, each classified as held or failed by round 3's rules (inputs.py: a clear
refusal names the key or file and the fix, prints no traceback and leaves nothing half-done). The cluster cases
(cluster.py) start real Ray clusters with the `ray` CLI on this machine: run it where no other Ray is at work.

    python -m bench.reliability.round4 [--work-dir DIR]      # writes bench/results/reliability/reliability_round4.json
"""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from bench.reliability.cluster import cluster_cases
from bench.reliability.harness import (
    ENVIRONMENT,
    Case,
    Result,
    api,
    base_values,
    cli,
    flat,
    run,
    run_round,
    write_yaml,
)

RAY = ["--set", "distributed=ray", "--set", "workers=2"]


def train_command(work: Path, runs: dict, name: str, *settings: str) -> list[str]:
    config = write_yaml(work / f"{name}.yaml", base_values(str(runs["model"]), iterations=1))
    return cli("train", config, "--output-dir", work / name, *settings)


def silent_server() -> tuple[socket.socket, int]:
    """Something that accepts connections on a loopback port and never speaks Ray's protocol."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    threading.Thread(target=lambda: [server.accept() for _ in range(16)], daemon=True).start()
    return server, server.getsockname()[1]


def address_cases(runs: dict, work: Path) -> list[Case]:
    server, port = silent_server()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()  # a port nothing listens on
    return [
        Case("cluster address", "ray_address=not_an_address",
             train_command(work, runs, "a1", *RAY, "--set", "ray_address=not_an_address"),
             names=["`ray_address` is 'not_an_address'", "HOST:PORT"], absent=[work / "a1"]),
        Case("cluster address", "ray_address=auto with no cluster",
             train_command(work, runs, "a2", *RAY, "--set", "ray_address=auto"),
             names=["auto", "ray start --head"]),
        Case("cluster address", f"a closed loopback port (127.0.0.1:{closed_port})",
             train_command(work, runs, "a3", *RAY, "--set", f"ray_address=127.0.0.1:{closed_port}"),
             names=[f"127.0.0.1:{closed_port}: nothing answers", "ray start --head"]),
        Case("cluster address", "a port where something else answers (ray_timeout 5)",
             train_command(work, runs, "a4", *RAY, "--set", f"ray_address=127.0.0.1:{port}", "--set",
                           "ray_timeout=5"),
             names=[f"127.0.0.1:{port}", "RAY_AUTH_MODE=token", "ray status"]),
        Case("pool size", "workers=1000 on this machine's local Ray",
             train_command(work, runs, "a5", "--set", "distributed=ray", "--set", "workers=1000"),
             names=["need 1000 CPUs", "Set `workers` to"]),
    ]


def output_cases(runs: dict, work: Path) -> list[Case]:
    return [
        Case("outputs", "doctor --output in a file system that cannot be written",
             cli("doctor", "--checks", "hf", "--output", "/sys/evotune-doctor.json"),
             names=["--output /sys/evotune-doctor.json cannot be written"]),
        Case("outputs", "compare --output X --output-dir Y",
             cli("compare", runs["run"], "--output", work / "c1", "--output-dir", work / "c2"),
             names=["name two directories", "--output-dir"], absent=[work / "c1", work / "c2"]),
    ]


def wording_cases(runs: dict, work: Path) -> list[Case]:
    return [
        Case("wording", "straggler_factor=-1", train_command(work, runs, "w1", *RAY, "--set", "straggler_factor=-1"),
             names=["`straggler_factor` is -1"], forbidden=["`prompt_shards`"]),
        Case("wording", "workers=0 with distributed: ray",
             train_command(work, runs, "w2", "--set", "distributed=ray", "--set", "workers=0"),
             names=["`workers` is 0"], forbidden=["set `distributed: ray`"]),
    ]


def second_writer(runs: dict, work: Path, flag: str) -> Result:
    """A run training in one process, then the same command with `flag` from another: the second must be refused
    naming the first, which must go on (Result.out holds what went wrong, "" when it held)."""
    name = f"live_{flag.strip('-')}"
    config = write_yaml(work / f"{name}.yaml", base_values(str(runs["model"]), iterations=500, eval_every=0))
    live = work / name
    first = subprocess.Popen(cli("train", config, "--output-dir", live), env=ENVIRONMENT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started, problems = time.perf_counter(), []
    try:
        while not (live / "checkpoint").exists() and time.perf_counter() - started < 300:
            time.sleep(0.3)
        settings = ["--set", "iterations=600"] if flag == "--resume" else []
        second = run(cli("train", *(() if flag == "--resume" else (config,)), "--output-dir", live, flag, *settings))
        text = flat(second.err)
        if second.rc == 0 or f"pid {first.pid}" not in text:
            problems.append(f"the second writer was not refused by the holder's name: exit {second.rc}: {text[-300:]}")
        if "Traceback" in text:
            problems.append("a Python traceback")
        if first.poll() is not None:
            problems.append(f"the first run died (exit {first.returncode})")
    finally:
        first.send_signal(signal.SIGINT)
        first.wait(timeout=120)
    return Result(0, "; ".join(problems), "", time.perf_counter() - started)


def export_of_a_training_run(runs: dict, work: Path) -> Result:
    config = write_yaml(work / "live_export.yaml", base_values(str(runs["model"]), iterations=500, eval_every=0))
    live = work / "live_export"
    training = subprocess.Popen(cli("train", config, "--output-dir", live), env=ENVIRONMENT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = time.perf_counter()
    try:
        while not (live / "checkpoint").exists() and time.perf_counter() - started < 300:
            time.sleep(0.3)
        result = run(cli("export", live, "--output-dir", work / "exported_live"))
    finally:
        training.send_signal(signal.SIGINT)
        training.wait(timeout=120)
    text = flat(result.err)
    problems = [] if ("still training" in text and "evotune export" in text and "--model" not in text
                      and result.rc != 0) else [f"exit {result.rc}: {text[-300:]}"]
    return Result(0, "; ".join(problems), "", time.perf_counter() - started)


def outcome_held(result: Result) -> str | None:
    return result.out or None


def writer_cases(runs: dict, work: Path) -> list[Case]:
    return [
        Case("one writer", "a second train --overwrite beside a running train",
             lambda: second_writer(runs, work, "--overwrite"), outcome=outcome_held),
        Case("one writer", "a second train --resume beside a running train",
             lambda: second_writer(runs, work, "--resume"), outcome=outcome_held),
        Case("wording", "export of a run still training", lambda: export_of_a_training_run(runs, work),
             outcome=outcome_held),
    ]


MEMORY = """
import torch
from evotune.config import TrainConfig
from evotune.trainer import Trainer
values = dict(model={model!r}, task="conciseness", population_size=4, antithetic=True, sigma=0.05, learning_rate=0.05,
              iterations=2, batch_size=2, max_new_tokens=4, num_eval=2, eval_every=0, dtype="float32", report_to=[])
one = Trainer(TrainConfig(**values), {one!r}); one.train()
batched = Trainer(TrainConfig(**values, population_batch_size=4), {batched!r})
real = batched.backend.generate_population
def generate_population(prompts, max_new_tokens, factors, stacked):
    if stacked[0].shape[0] > 1:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    return real(prompts, max_new_tokens, factors, stacked)
batched.backend.generate_population = generate_population
batched.train()
a, b = one.space.state_tensors(), batched.space.state_tensors()
assert all(torch.equal(a[k], b[k]) for k in a), "other weights after the halving"
print("same weights")
"""


def memory_cases(runs: dict, work: Path) -> list[Case]:
    code = MEMORY.format(model=str(runs["model"]), one=str(work / "m_one"), batched=str(work / "m_batched"))
    return [Case("memory", "an out-of-memory generate (injected) halves the batch down to one candidate",
                 api(code), outcome=lambda result: None if result.rc == 0 and "same weights" in result.out
                 and "ran out of memory" in result.err else f"exit {result.rc}: {flat(result.err)[-300:]}")]


def round4_cases(runs: dict, work: Path) -> list:
    return (address_cases(runs, work) + output_cases(runs, work) + wording_cases(runs, work)
            + writer_cases(runs, work) + memory_cases(runs, work) + cluster_cases(runs, work))


def main() -> None:
    run_round("reliability_round4", "python -m bench.reliability.round4", __doc__, round4_cases)


if __name__ == "__main__":
    main()

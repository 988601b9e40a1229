"""The reliability rounds' harness: each bad input is a Case (a command, and what a clear refusal or the
documented outcome looks like), tried in a fresh process, judged held or failed, and written to the round's
result file. The rounds' inputs are in inputs.py (round 3), cluster.py and round4.py."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import write_result

ROOT = Path(__file__).resolve().parents[2]

CLI = [sys.executable, "-m", "evotune.cli.main"]
TIMEOUT_S = 120  # a refusal is immediate; a command still running after this did the work it should have refused
# warnings are left on: a raw Python warning in place of an error is one of the failures looked for
ENVIRONMENT = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}

# Runs a Python API snippet; an exception is reported as JSON (its class, whether evotune's, its message).
API_RUNNER = """import json, sys
from evotune.errors import EvotuneError
try:
    exec(sys.argv[1])
except Exception as exc:
    print(json.dumps({"type": type(exc).__name__, "evotune_error": isinstance(exc, EvotuneError),
                      "message": str(exc)}))
    sys.exit(3)
"""


@dataclass
class Result:
    rc: int
    out: str
    err: str
    seconds: float


@dataclass
class Case:
    """One bad input. `names`: what a clear refusal must say (the key or file, and the fix); `absent`: paths that
    must not exist afterwards (nothing half-done); `outcome`: for a documented non-refusal, a check returning
    what is wrong (None: held)."""
    category: str
    name: str
    command: list[str] | Callable[[], Result]
    names: list[str] = field(default_factory=list)
    absent: list[Path] = field(default_factory=list)
    forbidden: list[str] = field(default_factory=list)
    outcome: Callable[[Result], str | None] | None = None


def run(command: list[str], timeout: float = TIMEOUT_S, cwd: Path | None = None) -> Result:
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=ENVIRONMENT, cwd=cwd,
                              errors="replace")
        return Result(done.returncode, done.stdout, done.stderr, time.perf_counter() - started)
    except subprocess.TimeoutExpired as exc:
        return Result(124, str(exc.stdout or ""), str(exc.stderr or ""), time.perf_counter() - started)


def cli(*arguments: str | Path) -> list[str]:
    return [*CLI, *map(str, arguments)]


def api(code: str) -> list[str]:
    return [sys.executable, "-c", API_RUNNER, code]


def flat(text: str) -> str:
    """Messages as one line: the CLI wraps its errors at 100 columns, mid-phrase."""
    return " ".join(text.split())


def judge(case: Case, result: Result) -> str | None:
    """Why the input failed, or None when it held."""
    if result.rc == 124:
        return f"still running after {TIMEOUT_S} s"
    if "Traceback (most recent call last)" in result.err + result.out and case.category != "python api":
        return "a Python traceback"
    text = flat(result.err + result.out)
    leftover = [str(path) for path in case.absent if path.exists() or path.is_symlink()]
    if leftover:
        return f"left {', '.join(leftover)} behind"
    said = [word for word in case.forbidden if word in text]
    if said:
        return f"says {said[0]!r}"
    if case.outcome is not None:
        return case.outcome(result)
    if result.rc == 0:
        return "accepted (exit 0)"
    missing = [word for word in case.names if word not in text]
    return f"the message does not name {missing}" if missing else None


# --- the runs the inputs are tried on ------------------------------------------------------------------------


def write_yaml(path: Path, values: dict) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def base_values(model: str, **overrides) -> dict:
    values = dict(model=model, task="conciseness", population_size=4, antithetic=True, sigma=0.05, learning_rate=0.05,
                  iterations=6, batch_size=2, max_new_tokens=4, num_eval=2, eval_every=3, checkpoint_every=1,
                  dtype="float32", report_to=[], log_drift=True)
    values.update(overrides)
    return values


def train(work: Path, name: str, values: dict) -> Path:
    config = write_yaml(work / f"{name}.yaml", values)
    result = run(cli("train", config, "--output-dir", work / name), timeout=600)
    if result.rc != 0:
        raise SystemExit(f"could not train the {name} run the inputs are tried on:\n{result.err[-3000:]}")
    return work / name


def prepare(work: Path) -> dict[str, Path]:
    """The tiny model, a finished 6-iteration run (drift logged), the same run stopped at iteration 1, and OpenES
    runs over an SVD-LoRA adapter on INT8 and INT4 bases."""
    from evotune.doctor import save_tiny_model

    model = save_tiny_model(str(work / "model"))
    runs = {"model": Path(model), "run": train(work, "run", base_values(model))}
    stopped = work / "stopped"  # a seed killed after its first iteration: its record ends there
    shutil.copytree(runs["run"], stopped)
    lines = (stopped / "metrics.jsonl").read_text().splitlines(keepends=True)
    (stopped / "metrics.jsonl").write_text("".join(lines[:2]))
    write_yaml(stopped / "config.yaml", {**read_yaml(stopped / "config.yaml"), "seed": 1})
    runs["stopped"] = stopped
    adapter = dict(space="svd_lora", strategy="openes", lora_rank=4, lora_init="gaussian", iterations=3, eval_every=0)
    for quantization in ("int8", "int4"):
        runs[quantization] = train(work, quantization, base_values(model, quantization=quantization, **adapter))
    return runs


def read_yaml(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())


def damaged_copy(runs: dict, work: Path, name: str, damage: Callable[[Path], None]) -> Path:
    copy = work / f"damaged_{name}"
    shutil.copytree(runs["run"], copy)
    damage(copy)
    return copy


# --- the inputs, by category -----------------------------------------------------------------------------------


def shown(command: list[str]) -> str:
    """A command as a user types it: `evotune ...`, or the Python API snippet."""
    return "evotune " + " ".join(command[len(CLI):]) if command[:len(CLI)] == CLI else command[-1]


def try_all(cases: list[Case]) -> list[dict]:
    outcomes = []
    for case in cases:
        result = case.command() if callable(case.command) else run(case.command)
        problem = judge(case, result)
        outcomes.append({"category": case.category, "input": case.name, "held": problem is None,
                         "why_failed": problem, "exit_code": result.rc, "seconds": round(result.seconds, 1),
                         "command": shown(case.command) if isinstance(case.command, list) else case.name})
        print(f"{'held  ' if problem is None else 'FAILED'} {case.category}: {case.name}"
              + (f" -- {problem}" if problem else ""), flush=True)
    return outcomes


def run_round(name: str, command: str, description: str, build_cases) -> None:
    """One round from the command line: --work-dir (default: a temporary directory, removed afterwards), the
    prepared runs, every case BUILD_CASES(runs, work) lists tried in a fresh process, and the round's result file."""
    parser = argparse.ArgumentParser(description=description.splitlines()[0])
    parser.add_argument("--work-dir", help="where the runs and outputs go (default: a temporary directory, removed)")
    arguments = parser.parse_args()
    work = Path(arguments.work_dir or tempfile.mkdtemp(prefix=f"evotune-{name}-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        outcomes = try_all(build_cases(prepare(work), work))
    finally:
        if not arguments.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    write_round(name, command, outcomes, started)


def write_round(name: str, command: str, outcomes: list[dict], started: float) -> None:
    """A round's result file: how many inputs held, per category and in all, and every input's outcome."""
    categories: dict[str, dict[str, int]] = {}
    for outcome in outcomes:
        counts = categories.setdefault(outcome["category"], {"held": 0, "total": 0})
        counts["held"] += outcome["held"]
        counts["total"] += 1
    write_result(name, {"command": command, "held": sum(o["held"] for o in outcomes), "total": len(outcomes),
                        "by_category": categories, "seconds": round(time.perf_counter() - started),
                        "failed": [o for o in outcomes if not o["held"]], "inputs": outcomes}, study="reliability")

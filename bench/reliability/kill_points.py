"""Reliability, round 3 (issue 41): `evotune train` killed with SIGKILL at many points of a run, then resumed; each
point is classified as resumed bit for bit, recovered, or failed.

One tiny run (a random 2-layer Llama, population 4, 4 iterations, a checkpoint every iteration) is trained once
uninterrupted: the reference. Then, for every kill point, the same command is started in a fresh directory and
killed -9 at that point: after N ms from the start (spread over import, model load, the first evaluation, the
iterations and final/), when a file appears (config.yaml, the first lines of metrics.jsonl, checkpoint.tmp and
its files, checkpoint/, checkpoint.old/, final/ and its files), or at an exact step of a checkpoint save or of
the loop (FAULT_HOOKS of evotune.files.checkpoint, or a wrapped function, in a runner that calls the same CLI
entry point: between the two renames of a save is microseconds long, too short to hit by polling). Then
`evotune train --output-dir DIR --resume` runs, and:

- **resumed bit for bit**: it exits 0, final/model.safetensors equals the reference's tensor for tensor,
  metrics.jsonl holds the reference's iterations once each with the same values (times aside), final/ is whole
  and no checkpoint.tmp is left; a run stopped before its first checkpoint must also say it starts again.
- **recovered**: the kill came before the run wrote its config.yaml (nothing of the run exists), `--resume`
  refuses without a traceback and says to start a new run without --resume, and that (the original command)
  ends on the reference's weights with the same checks.
- **failed**: anything else, with why.

A point whose run ended before the kill (an event it never reached) is reported as not reached, not counted.
Writes bench/results/reliability/reliability_kill_points.json.

    python -m bench.reliability.kill_points [--work-dir DIR] [--jobs 2]    # 45 points, ~9 min on 2 shared cores
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import write_result

CLI = [sys.executable, "-m", "evotune.cli.main"]
ENVIRONMENT = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
RUN_TIMEOUT_S = 300  # a tiny run takes ~10 s; one still running after this hangs
POLL_S = 0.001
CONFIG = {"task": "conciseness", "population_size": 4, "antithetic": True, "sigma": 0.05, "learning_rate": 0.05,
          "iterations": 4, "batch_size": 2, "max_new_tokens": 4, "eval_max_new_tokens": 8, "num_eval": 2,
          "eval_every": 2, "checkpoint_every": 1, "log_samples": 1, "dtype": "float32", "report_to": []}
# metrics.jsonl keys that are measurements of the machine, not of the run
UNTIMED = ("time_s", "peak_rss_mib")

# The same CLI entry point, with a SIGKILL at the KILL_COUNT-th checkpoint step named KILL_STEP, or as the
# KILL_COUNT-th call of KILL_CALL ("module:attribute.path") begins. Exit 99: the hook's target does not exist.
RUNNER = """import importlib, os, signal, sys
step, call, count, seen = os.environ.get("KILL_STEP"), os.environ.get("KILL_CALL"), int(os.environ["KILL_COUNT"]), [0]
def hit():
    seen[0] += 1
    if seen[0] == count:
        os.kill(os.getpid(), signal.SIGKILL)
if step:
    from evotune.runs import checkpoint
    checkpoint.FAULT_HOOKS.append(lambda name: hit() if name == step else None)
if call:
    module, _, path = call.partition(":")
    owner = importlib.import_module(module)
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent, None)
    real = getattr(owner, name, None)
    if real is None:
        sys.exit(99)
    def wrapped(*args, **kwargs):
        hit()
        return real(*args, **kwargs)
    setattr(owner, name, wrapped)
from evotune.cli.main import console_main
sys.exit(console_main(sys.argv[1:]))
"""


@dataclass
class Point:
    """One kill point. kind: time (`after_ms` from the start), file (`event` true of the run directory), step or
    call (a hook in the runner)."""
    kind: str
    name: str
    after_ms: float | None = None
    event: Callable[[Path], bool] | None = None
    hook: dict[str, str] = field(default_factory=dict)


# --- file events ------------------------------------------------------------------------------------------------


def exists(*relative: str) -> Callable[[Path], bool]:
    return lambda run: all((run / name).exists() for name in relative)


def absent_and_present(missing: str, *present: str) -> Callable[[Path], bool]:
    return lambda run: not (run / missing).exists() and exists(*present)(run)


def metric_lines(count: int) -> Callable[[Path], bool]:
    def event(run: Path) -> bool:
        try:
            return (run / "metrics.jsonl").read_bytes().count(b"\n") >= count
        except OSError:
            return False
    return event


def final_started(run: Path) -> bool:
    """final/ or its staging sibling (a final/ written beside, then renamed)."""
    return (run / "final").exists() or any(run.glob(".final*"))


FILE_EVENTS: list[tuple[str, Callable[[Path], bool]]] = [
    ("output directory created", exists(".")),
    ("config.yaml written", exists("config.yaml")),
    ("metrics.jsonl created", exists("metrics.jsonl")),
    ("metrics.jsonl: first line (iteration 0's evaluation)", metric_lines(1)),
    ("metrics.jsonl: iteration 1 logged, before its checkpoint", metric_lines(2)),
    ("first save: checkpoint.tmp/ created", exists("checkpoint.tmp")),
    ("first save: checkpoint.tmp/space.safetensors written", exists("checkpoint.tmp/space.safetensors")),
    ("first save: checkpoint.tmp/manifest.json written", exists("checkpoint.tmp/manifest.json")),
    ("first checkpoint/ in place", exists("checkpoint")),
    ("second save: checkpoint.tmp/ beside checkpoint/", exists("checkpoint", "checkpoint.tmp")),
    ("a save between its renames (checkpoint/ absent, .old and .tmp present)",
     absent_and_present("checkpoint", "checkpoint.old", "checkpoint.tmp")),
    ("checkpoint.old/ in place", exists("checkpoint.old")),
    ("metrics.jsonl: iteration 3 logged", metric_lines(4)),
    ("metrics.jsonl: last iteration logged", metric_lines(5)),
    ("final/ being written", final_started),
    ("final/model.safetensors appears", exists("final/model.safetensors")),
    ("final/tokenizer_config.json appears", exists("final/tokenizer_config.json")),
    ("final/README.md (model card) appears", exists("final/README.md")),
    ("curves.png appears", exists("curves.png")),
]

STEP_HOOKS = [  # (checkpoint step, which occurrence, what it is)
    ("mkdir checkpoint.tmp", 1, "first save: before checkpoint.tmp/"),
    ("write updates.json", 1, "first save: before updates.json"),
    ("write manifest.json", 1, "first save: before manifest.json"),
    ("rename checkpoint.tmp -> checkpoint", 1, "first save: before its rename"),
    ("rename checkpoint -> checkpoint.old", 1, "second save: before its first rename"),
    ("rename checkpoint.tmp -> checkpoint", 2, "second save: between its two renames"),
    ("delete checkpoint.old/state.json", 1, "third save: removing the oldest checkpoint"),
    ("rmdir checkpoint.old", 1, "third save: checkpoint.old/ emptied, before its rmdir"),
    ("rename checkpoint.tmp -> checkpoint", 4, "last save: between its two renames"),
]

CALL_HOOKS = [  # (function, which call, what it is)
    ("evotune.trainer:Trainer.step", 1, "iteration 1 begins (after iteration 0's evaluation)"),
    ("evotune.trainer:Trainer.step", 3, "iteration 3 begins"),
    ("evotune.trainer:Trainer.finish", 1, "after the last checkpoint, before final/"),
    ("evotune.trainer:write_model_card", 1, "final/ weights and tokenizer written, before the model card"),
]


def kill_points(timeline: dict[str, float]) -> list[Point]:
    """Timed points in the import phase and spread over the reference run's life from config.yaml to its end,
    then the file events and the hooks."""
    start, card, end = (timeline[name] for name in ("config.yaml written", "final/README.md (model card) appears",
                                                     "end"))
    times = [150.0, 700.0, 0.5 * start, 0.9 * start] + [start + (card - start) * k / 8 for k in range(1, 9)]
    times.append((card + end) / 2)  # everything written, the process on its way out
    points = [Point("time", f"after {ms:.0f} ms", after_ms=ms) for ms in times]
    points += [Point("file", name, event=event) for name, event in FILE_EVENTS]
    points += [Point("step", f"{what} ({step!r} #{count})", hook={"KILL_STEP": step, "KILL_COUNT": str(count)})
               for step, count, what in STEP_HOOKS]
    points += [Point("call", f"{what} ({call} #{count})", hook={"KILL_CALL": call, "KILL_COUNT": str(count)})
               for call, count, what in CALL_HOOKS]
    return points


# --- running and killing ----------------------------------------------------------------------------------------


def start(command: list[str], extra_env: dict[str, str] | None = None, log: Path | None = None) -> subprocess.Popen:
    """The run in its own session (so its group can be killed); stderr to `log`, else discarded (a pipe nobody
    reads would fill with the progress bar and stall the run)."""
    stderr = log.open("w") if log else subprocess.DEVNULL
    return subprocess.Popen(command, env={**ENVIRONMENT, **(extra_env or {})}, stdout=subprocess.DEVNULL,
                            stderr=stderr, start_new_session=True)


def kill(process: subprocess.Popen) -> None:
    """SIGKILL to the process group this script started (the run and anything it spawned)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def wait_for(process: subprocess.Popen, ready: Callable[[], bool]) -> bool:
    """Poll until `ready` (True) or the process ended first (False)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        if ready():
            return True
        if process.poll() is not None:
            return ready()
        time.sleep(POLL_S)
    return False


def killed_run(point: Point, command: list[str], run: Path) -> str | None:
    """Start the run and kill it at `point`; None when killed there, else why not (it ended first)."""
    if point.kind in ("step", "call"):
        process = start([sys.executable, "-c", RUNNER, *command[len(CLI):]], point.hook)
        process.wait(timeout=RUN_TIMEOUT_S)
        if process.returncode == -signal.SIGKILL:
            return None
        if process.returncode == 99:
            return "the hook's target does not exist (exit 99)"
        return f"the run ended (exit {process.returncode}) before the hook fired"
    process = start(command)
    started = time.monotonic()

    def ready() -> bool:
        return (time.monotonic() - started) * 1000 >= point.after_ms if point.kind == "time" else point.event(run)

    reached = wait_for(process, ready) and process.poll() is None
    exit_code = process.poll()
    kill(process)
    return None if reached else f"the run ended (exit {exit_code}) before the point"


def run(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, check=False, env=ENVIRONMENT, capture_output=True, text=True, errors="replace",
                          timeout=RUN_TIMEOUT_S)


def timeline_of_reference(command: list[str], run: Path) -> dict[str, float]:
    """The reference run, with the time (ms from its start) at which each file event first held."""
    log = run.with_suffix(".stderr")
    process = start(command, log=log)
    started, seen = time.monotonic(), {}
    while process.poll() is None:
        for name, event in FILE_EVENTS:
            if name not in seen and event(run):
                seen[name] = (time.monotonic() - started) * 1000
        time.sleep(POLL_S)
    if process.returncode != 0:
        raise SystemExit(f"the reference run failed (exit {process.returncode}):\n{log.read_text()[-3000:]}")
    return {**seen, "end": (time.monotonic() - started) * 1000}


# --- checking ---------------------------------------------------------------------------------------------------


def what_was_left(run: Path) -> str:
    """The run directory as the kill left it, in a few words."""
    if not run.exists():
        return "no output directory"
    names = sorted(path.name for path in run.iterdir())
    metrics = run / "metrics.jsonl"
    lines = metrics.read_bytes().count(b"\n") if metrics.exists() else None
    return ", ".join(f"metrics.jsonl ({lines} lines)" if name == "metrics.jsonl" else name for name in names) \
        or "an empty output directory"


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def untimed(record: dict) -> dict:
    return {key: value for key, value in record.items() if key not in UNTIMED}


def differences(run: Path, reference: Path) -> str | None:
    """What differs from the reference run (None: the same weights, record and a whole final/)."""
    from safetensors.torch import load_file

    ours, theirs = (load_file(str(path / "final" / "model.safetensors")) for path in (run, reference))
    if ours.keys() != theirs.keys():
        return f"final/ holds other tensors: {sorted(ours.keys() ^ theirs.keys())[:3]}"
    changed = [name for name in ours if ours[name].dtype != theirs[name].dtype or not ours[name].equal(theirs[name])]
    if changed:
        return f"{len(changed)} of {len(ours)} tensors differ (e.g. {changed[0]})"
    mine, expected = records(run), records(reference)
    if [r["iteration"] for r in mine] != [r["iteration"] for r in expected]:
        return f"metrics.jsonl iterations {[r['iteration'] for r in mine]}, not {[r['iteration'] for r in expected]}"
    if [untimed(r) for r in mine] != [untimed(r) for r in expected]:
        return "metrics.jsonl values differ from the uninterrupted run's"
    if "## Reproduce" not in (run / "final" / "README.md").read_text():
        return "final/README.md is not whole"
    return "checkpoint.tmp was left behind" if (run / "checkpoint.tmp").exists() else None


def judge(run_dir: Path, reference: Path, command: list[str]) -> tuple[str, str | None, str]:
    """(outcome, why it failed, what --resume printed to stderr) for a killed run directory."""
    had_config = (run_dir / "config.yaml").exists()
    had_checkpoint = any((run_dir / name).exists() for name in ("checkpoint", "checkpoint.old"))
    resumed = run_resume(run_dir)
    outcome, why = verdict(run_dir, reference, command, resumed, had_config, had_checkpoint)
    return outcome, why, resumed.stderr


def verdict(run_dir: Path, reference: Path, command: list[str], resumed: subprocess.CompletedProcess,
            had_config: bool, had_checkpoint: bool) -> tuple[str, str | None]:
    said = " ".join(resumed.stderr.split())  # messages wrap at 100 columns, mid-phrase
    if "Traceback (most recent call last)" in resumed.stderr:
        return "failed", f"--resume printed a traceback: {said[-300:]}"
    if resumed.returncode == 0:
        if had_config and not had_checkpoint and "iteration 0" not in said:
            return "failed", "resumed from nothing without the note that it starts again"
        problem = differences(run_dir, reference)
        return ("resumed bit for bit", None) if problem is None else ("failed", problem)
    if had_config:
        return "failed", f"--resume refused a run that has its config.yaml: {said[-300:]}"
    if "start a new run without --resume" not in said:
        return "failed", f"--resume refused without naming the recovery: {said[-300:]}"
    fresh = run(command)  # the documented recovery: the original command
    if fresh.returncode != 0:
        return "failed", f"the original command failed after --resume refused: {fresh.stderr[-300:]}"
    problem = differences(run_dir, reference)
    return ("recovered", None) if problem is None else ("failed", f"after the recovery: {problem}")


def run_resume(run_dir: Path) -> subprocess.CompletedProcess:
    return run([*CLI, "train", "--output-dir", str(run_dir), "--resume"])


def try_point(index: int, point: Point, config: Path, reference: Path, work: Path) -> dict:
    run_dir = work / f"point_{index:02d}"
    command = [*CLI, "train", str(config), "--output-dir", str(run_dir)]
    began = time.perf_counter()
    missed = killed_run(point, command, run_dir)
    left = what_was_left(run_dir)
    if missed:
        outcome, why, printed = "not reached", missed, ""
    else:
        outcome, why, printed = judge(run_dir, reference, command)
    note = next((line.strip() for line in printed.replace("\r", "\n").splitlines() if "no checkpoint yet" in line),
                None)
    result = {"kind": point.kind, "point": point.name, "outcome": outcome, "why_failed": why, "left_by_kill": left,
              "note": note, "seconds": round(time.perf_counter() - began, 1)}
    print(f"{outcome:20s} {point.kind:5s} {point.name} [{left}]" + (f" -- {why}" if why else ""), flush=True)
    shutil.rmtree(run_dir, ignore_errors=True)  # ~30 MB each
    return result


# --- main -------------------------------------------------------------------------------------------------------


def prepare(work: Path) -> tuple[Path, Path, dict[str, float]]:
    """The tiny model, the config file, and the uninterrupted reference run with its timeline."""
    import yaml

    from evotune.doctor import save_tiny_model

    model = save_tiny_model(str(work / "model"))
    config = work / "kill.yaml"
    config.write_text(yaml.safe_dump({"model": model, **CONFIG}, sort_keys=False))
    reference = work / "reference"
    timeline = timeline_of_reference([*CLI, "train", str(config), "--output-dir", str(reference)], reference)
    return config, reference, timeline


def counts(outcomes: list[dict]) -> dict[str, int]:
    tally = {name: sum(o["outcome"] == name for o in outcomes)
             for name in ("resumed bit for bit", "recovered", "failed", "not reached")}
    return {**tally, "kill points": len(outcomes) - tally["not reached"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", help="where the runs go (default: a temporary directory, removed)")
    parser.add_argument("--jobs", type=int, default=2, help="kill points tried at once")
    arguments = parser.parse_args()
    work = Path(arguments.work_dir or tempfile.mkdtemp(prefix="evotune-kill-points-"))
    work.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    try:
        config, reference, timeline = prepare(work)
        points = kill_points(timeline)
        with ThreadPoolExecutor(arguments.jobs) as pool:
            outcomes = list(pool.map(lambda item: try_point(*item, config, reference, work), enumerate(points)))
    finally:
        if not arguments.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    write_result("reliability_kill_points", {
        "command": "python -m bench.reliability.kill_points", "config": CONFIG, "counts": counts(outcomes),
        "by_kind": {kind: counts([o for o in outcomes if o["kind"] == kind]) for kind in ("time", "file", "step",
                                                                                       "call")},
        "reference_timeline_ms": {name: round(ms) for name, ms in timeline.items()}, "jobs": arguments.jobs,
        "seconds": round(time.perf_counter() - began), "failed": [o for o in outcomes if o["outcome"] == "failed"],
        "points": outcomes}, study="reliability")


if __name__ == "__main__":
    main()

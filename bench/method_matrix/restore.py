"""An SFT warm start's weights made again in a later session. A result file is a job's only mark of being done, but
the weights it made live under --runs, on the machine that ran it: a session that goes on with the study starts
with none. A job that starts from an SFT (ESSA's adapter; every method's start on countdown) whose weights are
missing waits for a restore job, which runs the same SFT again into --runs and checks it is the one recorded (the
same steps; the same adapter digest where the result records one; on a warm-start task the same answers to the
first held-out questions, one generate chunk, so the same batch). A mismatch stops it, and the runs still to start
from that SFT with it: they would not start where the seed's other runs did.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CHECKED_QUESTIONS = 64  # generate_in_chunks' chunk: the first generate of the recorded measurement, the same batch


def weights_folder(runs: Path, need: str) -> Path | None:
    """Where an SFT result's weights live under --runs (None when `need` is not an SFT's result file)."""
    parts = Path(need).parts  # warm_start/<task>/sft_seed<seed>.json
    if len(parts) != 3 or parts[0] != "warm_start":
        return None
    return runs / parts[1] / Path(parts[2]).stem


def unchecked_marker(folder: Path) -> Path:
    """Beside an SFT's weights while a restore job makes them again: gone only once they matched the result file."""
    return folder.parent / f"{folder.name}.unchecked"


def weights_present(folder: Path) -> bool:
    """The SFT's adapter and merged model are whole, and no restore left them unchecked (killed before its checks
    ended, or stopped by a mismatch): runs start only from weights the study recorded."""
    adapter, merged = folder / "adapter" / "adapter_model.safetensors", folder / "merged" / "config.json"
    return adapter.is_file() and merged.is_file() and not unchecked_marker(folder).exists()


def restore_job(need: str, results: Path) -> dict[str, Any]:
    task, name = Path(need).parts[1], Path(need).stem
    return {"kind": "restore", "task": task, "seed": int(name.removeprefix("sft_seed")), "needs": [need],
            "sft_result": str(results / need), "path": f"restored/{need}"}


def with_restores(ready: list[dict], results: Path, runs: Path, skip: set[str]) -> list[dict]:
    """The ready jobs, each that starts from an SFT whose weights are missing under --runs replaced by the job that
    makes them again (once per SFT; none whose path is in `skip`: running, or failed)."""
    jobs: list[dict] = []
    for job in ready:
        missing = [need for need in job["needs"] if (folder := weights_folder(runs, need)) is not None
                   and not weights_present(folder)]
        if not missing:
            jobs.append(job)
        for need in missing:
            restore = restore_job(need, results)
            if restore["path"] not in skip and all(restore["path"] != other["path"] for other in jobs):
                jobs.append(restore)
    return jobs


def restore(job: dict, runs: Path) -> dict[str, Any]:
    """The job's body: the SFT again, then the checks against its result file (raises on a mismatch)."""
    from .arms import TASKS
    from .commands import sft_and_merge, sft_folder
    from .measure import HELDOUT_SIZE, measure

    recorded = json.loads(Path(job["sft_result"]).read_text())
    warm_start = TASKS[job["task"]]["warm_start"]
    correct = recorded["heldout"]["correct"] if warm_start else ""  # per question, at the scored budget
    if warm_start and len(correct) != HELDOUT_SIZE:  # before the SFT's minutes, not after
        raise RuntimeError(f"{HELDOUT_SIZE} held-out questions here, {len(correct)} when the SFT was measured: "
                           "set METHOD_MATRIX_HELDOUT as it was then")
    marker = unchecked_marker(sft_folder(runs, job["task"], job["seed"]))
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("an SFT made again by a restore job, not yet checked against its result file\n")
    run, training = sft_and_merge(job, runs)
    checks: dict[str, Any] = {"steps": [training["steps"], recorded["training"]["steps"]]}
    if "adapter_sha256" in recorded["training"]:
        checks["adapter_sha256"] = [training["adapter_sha256"], recorded["training"]["adapter_sha256"]]
    if warm_start:
        merged = str(run / "merged")
        again = measure(merged, job["task"], merged, job["seed"], with_retention=False, questions=CHECKED_QUESTIONS)
        checks["first_answers_correct"] = [again["correct"], correct[:CHECKED_QUESTIONS]]
    differ = {name: pair for name, pair in checks.items() if pair[0] != pair[1]}
    if differ:
        raise RuntimeError(f"{job['sft_result']}: the SFT made again differs from the recorded one ({differ}: made "
                           "again, recorded). The runs still to start from it cannot start where the seed's others "
                           "did: delete that result file and the seed's runs that started from it, and run them again.")
    marker.unlink()
    return {"training": training, "checks": checks, "weights": str(run)}

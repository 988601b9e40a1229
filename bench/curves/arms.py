"""The learning-curve study's arms: each method at the method study's chosen setting on 2-digit addition, trained for
an hour of the quickstart's machine shape (2 threads, 7,200 CPU seconds of the run's own process tree:
`training_clock: cpu`, so a neighbour's load does not bend a curve), its model kept at every 600 CPU seconds and
scored after training, so scoring never eats training time.

An arm's setting is the method study's choice (bench/results/method_matrix/tune/, `run.selection`); an arm the study
has not tuned yet (mezo) takes its method's own defaults and the file says so.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bench.method_matrix.arms import COMMON, METHODS, TASKS, run_keys
from bench.method_matrix.run import selection

ROOT = Path(__file__).resolve().parents[2]
STUDY_RESULTS = ROOT / "bench" / "results" / "method_matrix"
RESULTS = ROOT / "bench" / "results" / "curves"
# CURVES_CPU_SECONDS shortens the budget for a smoke run of the machinery (written elsewhere, never under results)
CPU_SECONDS = float(os.environ.get("CURVES_CPU_SECONDS", 7200))
MARK_EVERY = float(os.environ.get("CURVES_MARK_EVERY", 600))  # CPU seconds between the kept models
THREADS = 2  # the quickstart's machine shape
SEEDS = [0, 1, 2]
ARMS = ["lowrank", "grpo_lora", "mezo", "full_es"]  # full_es last: if machine time allows


def marks() -> list[float]:
    """The CPU-second marks each run's model is kept at: MARK_EVERY, 2 x MARK_EVERY, ..., CPU_SECONDS."""
    count = int(CPU_SECONDS // MARK_EVERY)
    return [MARK_EVERY * (index + 1) for index in range(count)]


def arm_keys(arm: str, seed: int) -> tuple[dict[str, Any], str]:
    """The config keys of one curve run and where its setting comes from."""
    chosen = selection(STUDY_RESULTS, arm)
    setting = METHODS[arm]["grid"][chosen] if chosen is not None else {}
    source = (f"the method study's choice (setting {chosen} of its grid)" if chosen is not None
              else f"{arm}'s own defaults (the method study has not tuned it yet)")
    keys = run_keys(arm, "arithmetic", setting, seed, phase="main")
    keys.update({"max_training_seconds": CPU_SECONDS, "training_clock": "cpu", "iterations": 10**7,
                 "eval_every": 0, "num_eval": 64, "model": COMMON["model"]})
    if METHODS[arm]["command"] == "grpo":
        keys["checkpoint_every"] = 1  # every step's adapter: the mark's model is the last step before it
    else:
        # ES: every mark's mean is replayed from the update log (seeds only); a checkpoint every 5 iterations lets a
        # run stopped with its session resume in the next
        keys["checkpoint_every"] = 5
        keys["log_drift"] = False
    assert TASKS["arithmetic"]["keys"]["task"] == keys["task"]
    return keys, source

"""The estimate itself: each term's count (workload.py) times its fitted coefficient (coefficients.json), and the
fit that makes those coefficients from the scaling study's cells (bench/scaling/fit.py calls it)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .shape import ModelShape
from .workload import Workload, memory_terms, time_terms

COEFFICIENTS = Path(__file__).with_name("coefficients.json")


def load_coefficients(path: Path = COEFFICIENTS) -> dict[str, Any]:
    return json.loads(path.read_text())


@dataclass
class Estimate:
    method: str
    model: str
    parameters: int
    memory_mib: dict[str, float]  # each term after its coefficient
    seconds: dict[str, float]  # each term of an iteration's time on the study's machine, after its coefficient
    speed_ratio: float = 1.0  # this machine's probe over the study's (seconds scale by it)
    notes: list[str] = field(default_factory=list)

    @property
    def peak_mib(self) -> float:
        return sum(self.memory_mib.values())

    @property
    def seconds_per_iteration(self) -> float | None:
        """None when a term this run has was measured by no cell yet (its rate is unknown)."""
        if any(value is None for value in self.seconds.values()):
            return None
        return sum(self.seconds.values()) * self.speed_ratio


# Memory per counted MiB where no cell has measured a term yet: the counts' own bytes, and for activations the method
# study's probe (grpo-lora at 135M, 8 x 8 completions: 28 hidden sizes per token and layer, 1.45 times the
# elements saved_per_token_and_layer counts there) and for the
# logits their float32 copy and its softmax. A rate of time has no such prior: such a term is not predicted.
MEMORY_PRIORS = {"runtime": 700.0, "weights": 1.0, "fp32 master copy": 1.0, "drift copy": 1.0,
                 "stacked candidates": 1.0, "KV cache": 1.0, "optimizer state": 1.0, "activations": 1.45,
                 "logits": 2.0}


# Terms whose count is the bytes themselves, held at their prior: fitted freely on the first three model sizes, the
# copies every full-space ES cell holds together (fp32 master, drift copy) could not be told apart and the fit split
# them at 0 and 2 copies; a byte count needs no coefficient.
EXACT_MEMORY_TERMS = ("weights", "fp32 master copy", "drift copy", "stacked candidates", "optimizer state",
                      "KV cache")


# A machine type is not one speed: a 2-core AMX Xeon ran the scaling study's probe 1.8x faster than a 2-core EPYC, its
# 40-layer, 256-wide shape's decode (per-layer dispatch) faster still, its 4-layer, 1,536-wide shape's (arithmetic and
# memory traffic) slower than the probe said. So each machine type the study measured has two factors over the
# reference type's rates: one for the per-layer overhead, one for the rest (bench/scaling/fit.py fits both).
OVERHEAD_TERMS = ("layer passes (thousands)",)
UNIT_FACTORS = {"compute": 1.0, "overhead": 1.0}


def term_group(name: str) -> str:
    return "overhead" if name in OVERHEAD_TERMS else "compute"


def machine_key(cpu: str, amx_bf16: Any, avx512_bf16: Any, threads: int) -> str:
    """How coefficients.json names a machine type: the CPU model, its bfloat16 units and the threads."""
    units = "+".join(name for name, present in (("amx_bf16", amx_bf16), ("avx512_bf16", avx512_bf16)) if present)
    return f"{cpu} | {units or 'no bf16 units'} | {threads} threads"


def estimate(load: Workload, shape: ModelShape, coefficients: dict[str, Any] | None = None,
             speed_ratio: float = 1.0, factors: dict[str, float] | None = None) -> Estimate:
    """The fitted prediction for `load` on `shape`: every memory and time term scaled by its coefficient (and a time
    term by its machine type's factor for its group, `factors`; the reference type's: 1); a term no cell has
    measured yet takes its memory prior, and leaves the time unpredicted, with a note either way."""
    coefficients = coefficients or load_coefficients()
    factors = factors or UNIT_FACTORS
    unfitted = set(coefficients.get("unfitted", []))
    memory = {name: value * coefficients["memory"].get(name, 0.0) for name, value in memory_terms(load, shape).items()}
    seconds: dict[str, float | None] = {}
    for name, value in time_terms(load, shape).items():
        rate = coefficients["time"].get(name)
        seconds[name] = None if rate is None and value else value * (rate or 0.0) * factors[term_group(name)]
    counted = {**memory_terms(load, shape), **time_terms(load, shape)}
    missing = sorted(name for name in unfitted if counted.get(name))
    notes = [f"no scaling cell has measured {', '.join(missing)} yet: memory takes its first-principles value, and "
             "the time is not predicted"] if missing else []
    return Estimate(method=load.method, model=shape.name, parameters=load.parameters, memory_mib=memory,
                    seconds=seconds, speed_ratio=speed_ratio, notes=notes)


def fit(counted: list[dict[str, float]], measured: list[float], terms: list[str],
        offsets: list[float] | None = None, worst: bool = False) -> dict[str, float]:
    """Non-negative coefficients of `terms` that minimize the squared relative error of sum(coefficient x count)
    (+ each row's `offset`: the terms held at fixed values) against `measured` over the rows (scipy's NNLS on rows
    divided by their measured value); with `worst`, the largest relative error instead (a linear program: the
    promise a user reads is a worst case, and least squares trades one row's error for the others')."""
    import numpy as np
    from scipy.optimize import linprog, nnls

    matrix = np.array([[row.get(name, 0.0) for name in terms] for row in counted], dtype=float)
    target = np.array(measured, dtype=float)
    rest = target - np.array(offsets if offsets is not None else np.zeros_like(target), dtype=float)
    scaled, goal = matrix / target[:, None], rest / target  # (rows, terms), (rows,)
    if not worst:
        return {name: float(value) for name, value in zip(terms, nnls(scaled, goal)[0])}
    # variables: the coefficients and the bound t; minimize t subject to -t <= scaled @ c - goal <= t, c >= 0
    rows, size = scaled.shape
    bound = -np.ones((rows, 1))
    found = linprog(np.r_[np.zeros(size), 1.0], A_ub=np.block([[scaled, bound], [-scaled, bound]]),
                    b_ub=np.r_[goal, -goal], bounds=[(0, None)] * (size + 1))
    if not found.success:
        raise RuntimeError(f"the worst-error fit did not solve: {found.message}")
    return {name: float(value) for name, value in zip(terms, found.x[:size])}
"""The estimate itself: each memory term's count (workload.py) times its fitted coefficient, the time as the
roofline of the machine type's fitted rates (roofline.py), both kept in coefficients.json, and the memory fit that
makes those coefficients from the scaling study's cells (bench/scaling/fit.py calls it)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .roofline import time_counts, time_parts
from .shape import ModelShape
from .workload import Workload, memory_terms

COEFFICIENTS = Path(__file__).with_name("coefficients.json")


def load_coefficients(path: Path = COEFFICIENTS) -> dict[str, Any]:
    return json.loads(path.read_text())


@dataclass
class Estimate:
    method: str
    model: str
    parameters: int
    memory_mib: dict[str, float]  # each term after its coefficient
    seconds: dict[str, float | None]  # each part of an iteration's time at the machine type's rates (roofline.py)
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
# "GRPO runtime": what TRL's trainer holds beyond an ES run's runtime, whatever the shape and the micro-batch. Without
# it every grpo-full cell with 4 accumulation steps was 8-25% under its peak (its fixed part was read as logits)
MEMORY_PRIORS = {"runtime": 700.0, "GRPO runtime": 1000.0, "weights": 1.0, "fp32 master copy": 1.0, "drift copy": 1.0,
                 "stacked candidates": 1.0, "KV cache": 1.0, "optimizer state": 1.0, "activations": 1.45,
                 "logits": 2.0}


# Terms whose count is the bytes themselves, held at their prior: fitted freely on the first three model sizes, the
# copies every full-space ES cell holds together (fp32 master, drift copy) could not be told apart and the fit split
# them at 0 and 2 copies; a byte count needs no coefficient.
EXACT_MEMORY_TERMS = ("weights", "fp32 master copy", "drift copy", "stacked candidates", "optimizer state",
                      "KV cache")


# A machine type is not one speed: a 2-core AMX Xeon ran the scaling study's probe 1.8x faster than a 2-core EPYC, but
# narrow-12L's plain decode 3.3x faster (its cache holds the weights) and the same shape's batched full-es 1.3x. So
# each machine type the study measured has its own rates (bench/scaling/roofline.py fits them on its cells alone);
# another machine runs at the reference type's, scaled by its speed probe.
def machine_key(cpu: str, amx_bf16: Any, avx512_bf16: Any, threads: int) -> str:
    """How coefficients.json names a machine type: the CPU model, its bfloat16 units and the threads."""
    units = "+".join(name for name, present in (("amx_bf16", amx_bf16), ("avx512_bf16", avx512_bf16)) if present)
    return f"{cpu} | {units or 'no bf16 units'} | {threads} threads"


def machine_rates(coefficients: dict[str, Any], machine: str | None) -> dict[str, Any]:
    """The fitted time rates and last-level cache of `machine`'s type, or of the reference type where the study
    measured no cell of it."""
    types = coefficients["machine_types"]
    return types.get(machine or "") or types[coefficients["reference_machine"]]


def estimate(load: Workload, shape: ModelShape, coefficients: dict[str, Any] | None = None,
             speed_ratio: float = 1.0, machine: str | None = None) -> Estimate:
    """The fitted prediction for `load` on `shape`: every memory term scaled by its coefficient, the time at the
    rates of `machine`'s type (machine_key; the reference type's where the study measured none, times
    `speed_ratio`); a memory term no cell has measured takes its prior, and a time term no cell has measured leaves
    the time unpredicted, with a note either way."""
    coefficients = coefficients or load_coefficients()
    unfitted = set(coefficients.get("unfitted", []))
    counted_memory = memory_terms(load, shape)
    memory = {name: value * coefficients["memory"].get(name, 0.0) for name, value in counted_memory.items()}
    typed = machine_rates(coefficients, machine)
    counted = time_counts(load, shape)
    seconds = time_parts(counted, typed["rates"], typed["last_level_cache_mib"] * 2**20)
    missing = sorted({name for name in unfitted if counted_memory.get(name)}
                     | {name for name, value in seconds.items() if value is None})
    notes = [f"no scaling cell has measured {', '.join(missing)} yet: memory takes its first-principles value, and "
             "the time is not predicted"] if missing else []
    return Estimate(method=load.method, model=shape.name, parameters=load.parameters, memory_mib=memory,
                    seconds=seconds, speed_ratio=speed_ratio, notes=notes)


def fit(counted: list[dict[str, float]], measured: list[float], terms: list[str],
        offsets: list[float] | None = None) -> dict[str, float]:
    """Non-negative coefficients of `terms` that minimize the squared relative error of sum(coefficient x count)
    (+ each row's `offset`: the terms held at fixed values) against `measured` over the rows (scipy's NNLS on rows
    divided by their measured value): the memory fit."""
    import numpy as np
    from scipy.optimize import nnls

    matrix = np.array([[row.get(name, 0.0) for name in terms] for row in counted], dtype=float)
    target = np.array(measured, dtype=float)
    rest = target - np.array(offsets if offsets is not None else np.zeros_like(target), dtype=float)
    scaled, goal = matrix / target[:, None], rest / target  # (rows, terms), (rows,)
    return {name: float(value) for name, value in zip(terms, nnls(scaled, goal)[0])}

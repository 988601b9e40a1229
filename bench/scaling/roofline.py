"""A per-matmul roofline of an iteration's time, fitted per machine type on the scaling study's cells, and read
leave one shape out: the time model bench/scaling/README.md names as the next step for `evotune estimate`, tried here
before it replaces the estimate's linear one.

Each decode or prefill pass runs every layer's seven projections and, once, the LM head; a projection of `in x out`
weights over `rows` rows takes the larger of its bytes at the machine's read rate and its FLOPs at its arithmetic
rate (a roofline), and a layer takes at least a floor (its kernels' dispatch: the 256-wide shapes' decode costs the
same per layer at 12 and 40 layers). Weights that fit in the last-level cache read at their own rate, the stacked
copies of full-es's batched population at theirs. The rest adds as in the linear model: per layer pass (and per
adapter or low-rank layer pass), the KV cache's reads, training FLOPs and backward micro-batches' layers, the full
next-token distributions, and a constant per SFT step. Every rate is positive and fitted per machine type by least
squares on the log of predicted over measured time (scipy's least_squares), no factor between types.

    python -m bench.scaling.roofline       # fitted rates per type, the worst error in sample and per shape left out
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .fit import machine_type, rows

# Last-level cache per machine type (lscpu): the Xeon's holds narrow-12L's 88 MB and deep-narrow-40L's 176 MB of
# float32 weights, the EPYC's none of the study's shapes
LAST_LEVEL_CACHE = {"AMD EPYC": 32 * 2**20, "Intel(R) Xeon(R) Processor": 300 * 2**20}
ADAPTER_ARMS = ("es_lora", "essa", "grpo_lora", "sft_lora")  # a LoRA's two extra matmuls per target, per layer
# rate: (unit, starting value); the roofline's rates divide, every other one multiplies its count
RATES = {"weight reads": ("GB/s", 8.0), "cached weight reads": ("GB/s", 20.0), "stacked weight reads": ("GB/s", 8.0),
         "arithmetic": ("GFLOP/s", 80.0), "layer floor": ("ms", 0.5), "layer pass": ("ms", 0.5),
         "adapter layer pass": ("ms", 0.1), "low-rank layer pass": ("ms", 0.5), "KV cache reads": ("s/GB", 0.2),
         "training": ("s/TFLOP", 5.0), "backward layer": ("ms", 5.0), "token distributions": ("s/G elements", 30.0),
         "SFT step": ("s", 0.1)}


@dataclass(frozen=True)
class Cell:
    """What a cell's iteration does, in the roofline's counts."""
    passes: list[tuple[float, list[tuple[float, float]]]]  # (times run, [(bytes, FLOPs) per matmul]) per kind of pass
    cached: bool  # every copy of the weights fits in the last-level cache
    stacked: bool
    counts: dict[str, float]  # the additive terms' counts, by RATES name
    measured: float  # seconds per iteration


def projections(shape: Any) -> list[tuple[int, int]]:
    """(in, out) of a decoder layer's seven projections: q, k, v, o, gate, up, down."""
    hidden, kv, mlp = shape.hidden_size, shape.num_key_value_heads * shape.head_dim, shape.intermediate_size
    return [(hidden, hidden), (hidden, kv), (hidden, kv), (hidden, hidden), (hidden, mlp), (hidden, mlp),
            (mlp, hidden)]


def cell(row: dict[str, Any]) -> Cell:
    """A scaling row (bench/scaling/fit.py's rows()) in the roofline's counts."""
    load, shape, record = row["load"], row["shape"], row["record"]
    copies = max(load.stacked_copies, 1)
    per_copy = load.kv_sequences // copies if load.passes else 0  # sequences each copy's matmuls run over
    generates = load.passes / load.new_tokens if load.passes else 0.0  # a prefill each, then new_tokens - 1 decodes
    prompt = load.sequence_tokens - load.new_tokens
    passes = []
    for times, tokens in ((load.passes - generates, per_copy), (generates, per_copy * prompt)):
        if not times:
            continue
        layer = [(copies * a * b * load.dtype_bytes, 2.0 * copies * tokens * a * b) for a, b in projections(shape)]
        passes.append((times * shape.num_hidden_layers, layer))
        head = shape.hidden_size * shape.vocab_size  # the LM head runs on each sequence's last position only
        passes.append((times, [(copies * head * load.dtype_bytes, 2.0 * copies * per_copy * head)]))
    terms = row["time"]
    layer_passes = terms["layer passes (thousands)"]
    micro_batches = load.trained_tokens / (load.trained_sequences * load.sequence_tokens) if load.trained_sequences \
        else 0.0
    sft = load.command == "sft"
    counts = {"layer pass": layer_passes, "adapter layer pass": layer_passes * (record["arm"] in ADAPTER_ARMS),
              "low-rank layer pass": layer_passes * (record["arm"] == "lowrank"),
              "KV cache reads": terms["KV cache reads (GB)"], "training": terms["training (TFLOP)"],
              "backward layer": micro_batches * shape.num_hidden_layers / 1e3,
              "token distributions": 0.0 if sft else terms["token distributions (G elements)"],
              "SFT step": float(sft)}
    weights = load.parameters * load.dtype_bytes * copies
    return Cell(passes=passes, cached=weights < LAST_LEVEL_CACHE.get(record["machine"]["cpu"], 0),
                stacked=copies > 1, counts=counts, measured=record["seconds_per_iteration"])


def seconds(found: Cell, rates: dict[str, float]) -> float:
    """The cell's predicted seconds per iteration at `rates`."""
    # a read rate no cell of the fit measured (no shape in cache, no stacked copies): the plain one
    read = (rates.get("cached weight reads" if found.cached else "stacked weight reads" if found.stacked
                      else "weight reads") or rates["weight reads"]) * 1e9
    arithmetic = rates["arithmetic"] * 1e9
    floor = rates["layer floor"] / 1e3
    roof = sum(times * max(floor if len(matmuls) > 1 else 0.0,
                           sum(max(size / read, flops / arithmetic) for size, flops in matmuls))
               for times, matmuls in found.passes)
    return roof + sum((rates.get(name) or 0.0) * count for name, count in found.counts.items())


def measured_by(cells: list[Cell]) -> list[str]:
    """The rates some cell's time depends on: a type with no shape in its cache has no cached read rate."""
    uses = {"weight reads": any(not found.cached and not found.stacked for found in cells),
            "cached weight reads": any(found.cached for found in cells),
            "stacked weight reads": any(found.stacked and not found.cached for found in cells),
            "arithmetic": True, "layer floor": True}
    return [name for name in RATES if uses.get(name, any(found.counts.get(name) for found in cells))]


def fit(cells: list[Cell]) -> dict[str, float | None]:
    """Positive rates (log-parametrized) that minimize the squared log error of predicted over measured seconds;
    None for a rate no cell measures."""
    from scipy.optimize import least_squares

    names = measured_by(cells)

    def residuals(logs: np.ndarray) -> list[float]:
        rates = dict(zip(names, np.exp(logs)))
        return [math.log(seconds(found, rates) / found.measured) for found in cells]

    start = np.log([RATES[name][1] for name in names])
    fitted = dict(zip(names, np.exp(least_squares(residuals, start).x)))
    return {name: float(fitted[name]) if name in fitted else None for name in RATES}


def by_type(found: list[dict[str, Any]]) -> dict[str, list[tuple[str, str, Cell]]]:
    """(shape, arm, Cell) of every row, per machine type."""
    grouped: dict[str, list[tuple[str, str, Cell]]] = {}
    for row in found:
        grouped.setdefault(machine_type(row["record"]), []).append((row["record"]["shape"], row["record"]["arm"],
                                                                    cell(row)))
    return grouped


def errors(cells: list[Cell], rates: dict[str, float]) -> list[float]:
    return [seconds(found, rates) / found.measured - 1 for found in cells]


def leave_one_shape_out(found: list[dict[str, Any]]) -> dict[str, tuple[float, str, str]]:
    """Per shape, its worst time error when a fit on the other shapes' cells of the same machine type predicts its
    cells: (error, machine type, arm), the worst over the types that measured it."""
    worst: dict[str, tuple[float, str, str]] = {}
    for kind, typed in by_type(found).items():
        for shape in sorted({name for name, _, _ in typed}):
            rates = fit([found_cell for name, _, found_cell in typed if name != shape])
            held = [(arm, found_cell) for name, arm, found_cell in typed if name == shape]
            error, arm = max(zip(errors([found_cell for _, found_cell in held], rates), [arm for arm, _ in held]),
                             key=lambda item: abs(item[0]))
            if abs(error) > abs(worst.get(shape, (0.0,))[0]):
                worst[shape] = (error, kind, arm)
    return worst


def summary(found: list[dict[str, Any]]) -> str:
    """One line: the worst time error per shape left out, largest first (what bench/scaling/README.md quotes)."""
    worst = leave_one_shape_out(found)
    shapes = sorted(worst, key=lambda shape: -abs(worst[shape][0]))
    return "; ".join(f"{shape} {abs(worst[shape][0]):.0%} ({worst[shape][2]}, {worst[shape][1].split(' |')[0]})"
                     for shape in shapes)


def main() -> None:
    found = rows()
    for kind, typed in by_type(found).items():
        cells = [found_cell for _, _, found_cell in typed]
        rates = fit(cells)
        print(f"{kind} ({len(cells)} cells): worst error in sample {max(map(abs, errors(cells, rates))):.1%}")
        for name, value in rates.items():
            print(f"  {name:22} " + ("no cell of this type measures it" if value is None
                                     else f"{value:10.3f} {RATES[name][0]}"))
    print("worst time error per shape left out: " + summary(found))


if __name__ == "__main__":
    main()

"""An iteration's time as a per-matmul roofline plus linear terms, at one machine type's fitted rates.

Each decode or prefill pass runs every layer's seven projections and, once, the LM head; a projection of `in x out`
weights over `rows` rows takes the larger of its bytes at the type's read rate and its FLOPs at its arithmetic rate
(a roofline), and a layer takes at least a floor (its kernels' dispatch: the 256-wide shapes' decode costs the same
per layer at 12 and 40 layers). Weights that fit in the type's last-level cache read at their own rate, the stacked
copies of full-es's batched population at theirs. The rest adds: a cost per layer pass (and per adapter layer pass:
its extra kernels), the KV cache's reads, training FLOPs and each backward micro-batch's layers, and GRPO's full
next-token distributions. (A cost per low-rank layer pass, for lowrank-es's per-member factors, was fitted at 0 on
the EPYC and made no type's or shape's worst error smaller: it is not counted.) The rates are fitted per machine
type on the scaling study's cells (bench/scaling/roofline.py); a linear model with two factors between types missed
the narrow shapes by up to 118% out of sample, this one by less (bench/scaling/README.md gives each shape's, checked
against the committed fit by a test).
"""

from __future__ import annotations

from dataclasses import dataclass

from .shape import ModelShape
from .workload import Workload

# rate name: its unit and where a fit starts it. The read and arithmetic rates divide their counts (bytes, FLOPs),
# every other one multiplies its count (a rate in ms its count in thousands)
RATES = {"weight reads": ("GB/s", 8.0), "cached weight reads": ("GB/s", 20.0), "stacked weight reads": ("GB/s", 8.0),
         "arithmetic": ("GFLOP/s", 80.0), "layer floor": ("ms", 0.5), "layer pass": ("ms", 0.5),
         "adapter layer pass": ("ms", 0.1), "KV cache reads": ("s/GB", 0.2),
         "training": ("s/TFLOP", 5.0), "backward layer": ("ms", 5.0), "token distributions": ("s/G elements", 30.0)}
ROOFLINE_RATES = ("weight reads", "cached weight reads", "stacked weight reads", "arithmetic", "layer floor")
PROJECTIONS = "projections (roofline)"


@dataclass(frozen=True)
class TimeCounts:
    """What an iteration does, in the roofline's counts."""
    passes: tuple[tuple[float, tuple[tuple[float, float], ...]], ...]  # (times run, ((bytes, FLOPs) per matmul))
    weight_bytes: float  # every copy of the weights an iteration reads in one pass
    stacked: bool  # full-es's batched population: the copies stream through one batched matmul
    counts: dict[str, float]  # the additive rates' counts, by RATES name


def projections(shape: ModelShape) -> list[tuple[int, int]]:
    """(in, out) of a decoder layer's seven projections: q, k, v, o, gate, up, down."""
    hidden, kv, mlp = shape.hidden_size, shape.num_key_value_heads * shape.head_dim, shape.intermediate_size
    return [(hidden, hidden), (hidden, kv), (hidden, kv), (hidden, hidden), (hidden, mlp), (hidden, mlp),
            (mlp, hidden)]


def time_counts(load: Workload, shape: ModelShape) -> TimeCounts:
    """`load`'s iteration on `shape` in the roofline's counts."""
    copies = max(load.stacked_copies, 1)
    per_copy = load.kv_sequences // copies if load.passes else 0  # sequences each copy's matmuls run over
    generates = load.passes / load.new_tokens if load.passes and load.new_tokens else 0.0  # a prefill each
    prompt = load.sequence_tokens - load.new_tokens
    passes = []
    for times, tokens in ((load.passes - generates, per_copy), (generates, per_copy * prompt)):  # decode, prefill
        if not times:
            continue
        layer = tuple((copies * a * b * load.dtype_bytes, 2.0 * copies * tokens * a * b) for a, b in projections(shape))
        passes.append((times * shape.num_hidden_layers, layer))
        head = shape.hidden_size * shape.vocab_size  # the LM head runs on each sequence's last position only
        passes.append((times, ((copies * head * load.dtype_bytes, 2.0 * copies * per_copy * head),)))
    layer_passes = load.passes * shape.num_hidden_layers / 1e3
    micro_batches = load.trained_tokens / (load.trained_sequences * load.sequence_tokens) \
        if load.trained_sequences else 0.0
    sft = load.command == "sft"
    # each decode step reads the keys and values every held sequence has cached, at every layer: at 135M and 128
    # sequences (lowrank-es's batched population) as many bytes as the weights themselves
    kv_reads = load.passes * load.kv_sequences * max(load.sequence_tokens - load.new_tokens / 2, 0) \
        * shape.num_hidden_layers * 2 * shape.num_key_value_heads * shape.head_dim * load.dtype_bytes / 1e9
    counts = {"layer pass": layer_passes, "adapter layer pass": layer_passes if load.adapter else 0.0,
              "KV cache reads": kv_reads,
              "training": load.training_flops_per_token * load.parameters * load.trained_tokens / 1e12,
              # GRPO's sampling and log-probabilities over the vocabulary; SFT's one cross-entropy per step is not
              # counted: at GRPO's rate it made the narrow shapes' SFT steps 30 points slower out of sample
              "token distributions": 0.0 if sft else load.distribution_tokens * shape.vocab_size / 1e9,
              "backward layer": micro_batches * shape.num_hidden_layers / 1e3}
    return TimeCounts(passes=tuple(passes), weight_bytes=float(load.parameters * load.dtype_bytes * copies),
                      stacked=copies > 1, counts=counts)


def read_rate_name(found: TimeCounts, cache_bytes: float) -> str:
    """Which rate this iteration's weight reads go at: the cache's where every copy fits in it, the stacked copies'
    for a batched population, else the plain one."""
    return "cached weight reads" if found.weight_bytes < cache_bytes else \
        "stacked weight reads" if found.stacked else "weight reads"


def read_rate(found: TimeCounts, rates: dict[str, float | None], cache_bytes: float) -> float:
    """GB/s of this iteration's weight reads (read_rate_name's; the plain rate stands in for one no cell of the type
    measured)."""
    return rates.get(read_rate_name(found, cache_bytes)) or rates["weight reads"]


def time_parts(found: TimeCounts, rates: dict[str, float | None], cache_bytes: float) -> dict[str, float | None]:
    """Seconds of each part of an iteration: the projections' roofline, then each additive term (None: a term this
    iteration counts whose rate no cell of the type measured, so its time is unknown)."""
    read = read_rate(found, rates, cache_bytes) * 1e9
    arithmetic = rates["arithmetic"] * 1e9
    floor = (rates.get("layer floor") or 0.0) / 1e3
    roof = sum(times * max(floor if len(matmuls) > 1 else 0.0,  # a layer, not the LM head, has the floor
                           sum(max(size / read, flops / arithmetic) for size, flops in matmuls))
               for times, matmuls in found.passes)
    parts: dict[str, float | None] = {PROJECTIONS: roof}
    for name, count in found.counts.items():
        rate = rates.get(name)
        parts[name] = None if rate is None and count else count * (rate or 0.0)
    return parts

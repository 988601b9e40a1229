"""Fit `evotune estimate`'s coefficients on the scaling study's measured cells, and print its predictions beside them.

Each evotune cell (and plain generation, the pure-inference reference) is counted by evotune.estimate.workload from
the config it ran and its shape. Memory: one non-negative coefficient per term, fitted on every cell at once
(least squares on relative error, peak RSS). Time: the per-matmul roofline of evotune.estimate.roofline, its rates
fitted per machine type on that type's cells alone (roofline.py); a linear model over one type's rates with two
factors per other type missed the narrow shapes by up to 118% out of sample. The cells of a shape also measured on
another machine type (CROSS) are read beside the study's own; the peer's cells are shown, not fitted.

    python -m bench.scaling.fit            # fit, write src/evotune/estimate/coefficients.json, print the table
    python -m bench.scaling.fit --check    # print the table with the committed coefficients
    python -m bench.scaling.fit --drop     # refit without each term in turn: the worst error each drop causes
    python -m bench.scaling.fit --rates    # each machine type's time rates, its worst time error in sample, and the
                                           # worst per shape left out (the committed coefficients),
                                           # then per shape and machine type (each refitted without it)
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from evotune.estimate.model import (
    COEFFICIENTS,
    EXACT_MEMORY_TERMS,
    MEMORY_PRIORS,
    estimate,
    fit,
    load_coefficients,
    machine_key,
)
from evotune.estimate.roofline import RATES
from evotune.estimate.workload import memory_terms

from .arms import ARMS
from .roofline import DROPPABLE, fit_types, summary
from .run import DTYPE, RESULTS
from .shapes import SHAPES, TOKENIZER_VOCAB
from .workloads import FITTED, cell_workload, model_shape

# The `evotune estimate --method` names each arm's cells measure (mezo is full-es's space with 2 members: its cells)
ARM_METHODS = {"full_es": ("full-es", "mezo"), "full_es_batched": ("full-es", "mezo"), "lowrank": ("lowrank-es",),
               "es_lora": ("lora-es",), "essa": ("essa",), "grpo_lora": ("grpo-lora",), "grpo_full": ("grpo-full",),
               "grpo_full_accumulation4": ("grpo-full",), "sft_lora": ("sft",), "generation": ()}
MEMORY_BOUND, TIME_BOUND = 0.15, 0.25  # the issue's: predicted within 15% of peak memory, 25% of time
# cells of shapes the study also measured on another machine type: they fit that type's factors (and are read with the
# study's own by rows(); the page's tables of what fits read the study's own alone)
CROSS = RESULTS / f"{DTYPE}_cross"
# cells measured again in another session on a machine type that already has them: how far one session's time moves
REPEATS = RESULTS / f"{DTYPE}_repeat"


def rows(results: Path = RESULTS / DTYPE, cross: Path | None = CROSS,
         repeats: Path | None = REPEATS) -> list[dict[str, Any]]:
    """Every cell that ran (the study's, then `cross`'s cells of shapes measured on another machine type), with its
    counts, its machine type and that type's median probe. A cell measured again in another session on the same
    machine type (`repeats`) is one row at the mean of its sessions' times and peaks (repeated_cells)."""
    found = []
    paths = sorted(results.glob("*/*.json")) + [path for folder in (cross, repeats) if folder and folder.is_dir()
                                                for path in sorted(folder.glob("*/*/*.json"))]
    for path in paths:
        record = json.loads(path.read_text())
        if record["status"] != "ran" or ARMS[record["arm"]]["command"] not in FITTED:
            continue
        load, shape = cell_workload(record), model_shape(record["shape"])
        found.append({"record": record, "memory": memory_terms(load, shape), "load": load, "shape": shape,
                      "probe_s": record["speed_probe"]["probe_s"]})
    found = repeated_cells(found)
    probes = [machine_probe(found, row) for row in found]  # within one machine type: its median probe
    for row, probe in zip(found, probes):
        row["probe_s"] = probe
    return found


def repeated_cells(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per shape, arm and machine type: a cell measured in several sessions is read at the mean of their
    seconds per iteration and peaks, its record listing each session's (`sessions`). On a 2-core EPYC, SmolLM2-360M's
    cells measured again a week later moved by -13% to +20% with no change in the work: one session's time is that
    uncertain, and the fit should not follow it."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in found:
        record = row["record"]
        groups.setdefault((record["shape"], record["arm"], machine_type(record)), []).append(row)
    merged = []
    for cells in groups.values():
        if len(cells) == 1:
            merged.append(cells[0])
            continue
        records = [cell["record"] for cell in cells]
        record = {**records[0], "sessions": [{key: other[key] for key in ("date", "seconds_per_iteration",
                                                                          "peak_rss_mib")} for other in records],
                  "seconds_per_iteration": statistics.mean(other["seconds_per_iteration"] for other in records),
                  "peak_rss_mib": statistics.mean(other["peak_rss_mib"] for other in records)}
        merged.append({**cells[0], "record": record})
    return merged


def machine_type(record: dict[str, Any]) -> str:
    machine = record["machine"]
    return machine_key(machine["cpu"], machine.get("amx_bf16"), machine.get("avx512_bf16"), machine["threads"])


def machine_probe(found: list[dict[str, Any]], row: dict[str, Any]) -> float:
    """The speed probe a cell's time is scaled by: the median of every probe recorded on its machine type. One
    session's probe moved by half against another's on the same machine (a short generate's noise), more than the
    machine's speed did, so within a type cells are not scaled against each other; across types they are."""
    kind = machine_type(row["record"])
    return statistics.median(other["record"]["speed_probe"]["probe_s"] for other in found
                             if machine_type(other["record"]) == kind)


def sizes(found: list[dict[str, Any]]) -> list[str]:
    """The model shapes among the rows, smallest first."""
    return sorted({row["record"]["shape"] for row in found}, key=lambda name: SHAPES[name].parameters())


def fit_all(found: list[dict[str, Any]], drop: str | None = None, held_out: bool = True) -> dict[str, Any]:
    """Memory: every term some cell counts is fitted; a term none counts yet keeps its prior (MEMORY_PRIORS), named
    in `unfitted`. Time: each machine type's rates (roofline.py's fit_types). `drop`: a memory term or an additive
    time term left out of the fit (the test that each term is needed)."""
    measured = [name for name in found[0]["memory"] if any(row["memory"].get(name) for row in found)]
    memory_names = [name for name in measured if name != drop]
    shapes = sizes(found)
    held = [name for name in EXACT_MEMORY_TERMS if name in memory_names]  # byte counts: no coefficient
    offsets = [sum(MEMORY_PRIORS[name] * row["memory"].get(name, 0.0) for name in held) for row in found]
    memory = fit([row["memory"] for row in found], [row["record"]["peak_rss_mib"] for row in found],
                 [name for name in memory_names if name not in held], offsets)
    memory.update({name: MEMORY_PRIORS[name] for name in held})
    memory.update({name: MEMORY_PRIORS[name] for name in found[0]["memory"] if name not in measured})
    if drop in found[0]["memory"]:
        memory[drop] = 0.0
    machines = fit_types(found, machine_type, drop if drop in DROPPABLE else None)
    cpus = sorted({row["record"]["machine"]["cpu"] for row in found})
    unfitted = [name for name in found[0]["memory"] if name not in measured]
    reference = reference_type(found)
    coefficients = {"memory": memory, "machine_types": machines, "reference_machine": reference,
                    "reference_probe_s": machines[reference]["probe_s"]}
    fitted_rows = errors(found, coefficients) if drop is None else []
    worst_errors = {"memory": round(max(abs(row["memory_error"]) for row in fitted_rows), 3),
                    "time": round(max(abs(row["time_error"]) for row in fitted_rows), 3)} if fitted_rows else {}
    out_of_sample = held_out_errors(found) if held_out and drop is None else {}
    return {"memory": memory, "machine_types": machines, "reference_machine": reference,
            "held_at_prior": held, "unfitted": unfitted, "worst_error": worst_errors,
            "held_out_error": out_of_sample,
            "reference_probe_s": machines[reference]["probe_s"], "cells": len(found), "shapes": shapes,
            "vocabulary": TOKENIZER_VOCAB, "machines": cpus, "dtype": DTYPE,
            "threads": found[0]["record"]["machine"]["threads"],
            "note": "fitted by bench/scaling/fit.py on bench/results/scaling; memory in MiB per counted MiB; time: "
                    "each machine type's rates (evotune/estimate/roofline.py's RATES units), another type at the "
                    "reference type's times its probe's ratio; probes: evotune doctor --speed, float32"}


def reference_type(found: list[dict[str, Any]]) -> str:
    """The machine type with the most cells: its rates are the coefficients, other types' factors are over it."""
    counts: dict[str, int] = {}
    for row in found:
        counts[machine_type(row["record"])] = counts.get(machine_type(row["record"]), 0) + 1
    return max(sorted(counts), key=counts.get)


def errors(found: list[dict[str, Any]], coefficients: dict[str, Any]) -> list[dict[str, Any]]:
    """Each cell's predicted and measured peak and time, and their relative errors: a cell of a machine type the
    coefficients have rates for at that type's rates, another at the reference type's times its probe's ratio."""
    table = []
    types = coefficients.get("machine_types", {})
    for row in found:
        record = row["record"]
        kind = machine_type(record)
        ratio = 1.0 if kind in types else row["probe_s"] / coefficients["reference_probe_s"]
        predicted = estimate(row["load"], row["shape"], coefficients, speed_ratio=ratio, machine=kind)
        table.append({"shape": record["shape"], "arm": record["arm"], "machine": kind,
                      "measured_mib": record["peak_rss_mib"],
                      "predicted_mib": round(predicted.peak_mib), "measured_s": record["seconds_per_iteration"],
                      "predicted_s": round(predicted.seconds_per_iteration, 2),
                      "memory_error": predicted.peak_mib / record["peak_rss_mib"] - 1,
                      "time_error": predicted.seconds_per_iteration / record["seconds_per_iteration"] - 1})
    return table


def held_out_rows(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every cell predicted by a fit on the other shapes' cells alone (leave one shape out): errors()'s rows. Needs
    three shapes: two leave one per-parameter slope."""
    shapes = sizes(found)
    if len(shapes) < 3:
        return []
    table = []
    for shape in shapes:
        coefficients = fit_all([row for row in found if row["record"]["shape"] != shape], held_out=False)
        table += errors([row for row in found if row["record"]["shape"] == shape], coefficients)
    return table


def held_out_shapes(found: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Each shape's cells' worst memory and time errors when a fit on the other shapes predicts them (an
    out-of-sample check of the in-sample table)."""
    table = held_out_rows(found)
    return {shape: worst([row for row in table if row["shape"] == shape]) for shape in sizes(found) if table}


def held_out_errors(found: list[dict[str, Any]]) -> dict[str, Any]:
    """What `evotune estimate` prints beside each method: the worst leave-one-shape-out errors of its arms' cells
    (ARM_METHODS), and per shape; {} below three shapes."""
    table = held_out_rows(found)
    if not table:
        return {}

    def rounded(rows: list[dict[str, Any]]) -> dict[str, float]:
        memory, seconds = worst(rows)
        return {"memory": round(memory, 3), "time": round(seconds, 3), "cells": len(rows)}

    methods = sorted({method for row in table for method in ARM_METHODS[row["arm"]]})
    return {"by_method": {method: rounded([row for row in table if method in ARM_METHODS[row["arm"]]])
                          for method in methods},
            "by_shape": {shape: rounded([row for row in table if row["shape"] == shape]) for shape in sizes(found)},
            "worst": rounded(table)}


def in_sample(found: list[dict[str, Any]], coefficients: dict[str, Any]) -> dict[str, float]:
    """Per machine type, the worst time error of its cells under `coefficients`."""
    table = errors(found, coefficients)
    return {kind: max(abs(row["time_error"]) for row, cell in zip(table, found) if machine_type(cell["record"]) == kind)
            for kind in coefficients["machine_types"]}


def print_rates(found: list[dict[str, Any]], coefficients: dict[str, Any]) -> None:
    worst_by_type = in_sample(found, coefficients)
    for kind, typed in coefficients["machine_types"].items():
        print(f"{kind} ({typed['cells']} cells, last-level cache {typed['last_level_cache_mib']} MiB): worst time "
              f"error in sample {worst_by_type[kind]:.1%}")
        for name, value in typed["rates"].items():
            print(f"  {name:22} " + ("no cell of this type measures it" if value is None
                                     else f"{value:10.3f} {RATES[name][0]}"))
    print("worst time error per shape left out: " + summary(coefficients["held_out_error"]["by_shape"]))
    print("the same per machine type (its worst cell): where another session's repeat would help most")
    table = held_out_rows(found)
    for kind in coefficients["machine_types"]:
        for shape in sizes(found):
            cells = [row for row in table if row["shape"] == shape and row["machine"] == kind]
            if cells:
                cell = max(cells, key=lambda row: abs(row["time_error"]))
                print(f"  {kind[:40]:40} {shape:16} {cell['time_error']:+6.0%} ({cell['arm']}: "
                      f"{cell['measured_s']:.1f} s measured, {cell['predicted_s']:.1f} s predicted)")


def worst(table: list[dict[str, Any]]) -> tuple[float, float]:
    return max(abs(row["memory_error"]) for row in table), max(abs(row["time_error"]) for row in table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="the committed coefficients, not a new fit")
    parser.add_argument("--drop", action="store_true", help="refit without each term: the worst error it causes")
    parser.add_argument("--rates", action="store_true", help="print each machine type's time rates (committed)")
    args = parser.parse_args()
    found = rows()
    if args.rates:
        print_rates(found, load_coefficients())
        return
    coefficients = load_coefficients() if args.check else fit_all(found)
    if not args.check:
        COEFFICIENTS.write_text(json.dumps(coefficients, indent=1) + "\n")
    table = errors(found, coefficients)
    print(f"{'shape':14} {'arm':26} {'MiB measured':>12} {'predicted':>9} {'error':>6}   {'s measured':>10} "
          f"{'predicted':>9} {'error':>6}")
    for row in table:
        print(f"{row['shape']:14} {row['arm']:26} {row['measured_mib']:12,.0f} {row['predicted_mib']:9,.0f} "
              f"{row['memory_error']:+6.0%}   {row['measured_s']:10.1f} {row['predicted_s']:9.1f} "
              f"{row['time_error']:+6.0%}")
    memory, seconds = worst(table)
    print(f"worst: memory {memory:.1%} (bound {MEMORY_BOUND:.0%}), time {seconds:.1%} (bound {TIME_BOUND:.0%}) "
          f"over {len(table)} cells")
    for shape, error in (coefficients.get("held_out_error") or {}).get("by_shape", {}).items():  # fitted with them
        print(f"{shape} predicted by a fit on the other shapes alone: worst memory {error['memory']:.1%}, time "
              f"{error['time']:.1%}")
    if args.drop:
        for name in [*found[0]["memory"], *DROPPABLE]:
            memory, seconds = worst(errors(found, fit_all(found, drop=name)))
            print(f"without {name!r}: worst memory {memory:.1%}, time {seconds:.1%}")


if __name__ == "__main__":
    main()

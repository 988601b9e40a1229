"""The fit of `evotune estimate`'s time rates (evotune.estimate.roofline) per machine type, on the scaling study's
cells of that type alone: every rate positive (log-parametrized), least squares on the log of predicted over
measured time (scipy's least_squares), no factor between types. A read rate no cell of a type measures (no shape in
its cache, no stacked copies) is left unfitted, and the plain read rate stands in for it. fit.py calls it;
`python -m bench.scaling.fit --rates` prints each type's rates and errors.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np

from evotune.estimate.roofline import RATES, ROOFLINE_RATES, TimeCounts, read_rate_name, time_counts, time_parts

# Last-level cache per CPU model (lscpu): the Xeon's holds narrow-12L's 88 MB, narrow-24L's 125 MB and deep-narrow-40L's
# 176 MB of float32 weights, the EPYC's none of the study's shapes
LAST_LEVEL_CACHE_MIB = {"AMD EPYC": 32, "Intel(R) Xeon(R) Processor": 300}
DROPPABLE = tuple(name for name in RATES if name not in ROOFLINE_RATES)  # the additive terms (fit.py --drop)


def seconds(counted: TimeCounts, rates: dict[str, float | None], cache_mib: float) -> float:
    return sum(part or 0.0 for part in time_parts(counted, rates, cache_mib * 2**20).values())


def measured_by(cells: list[tuple[TimeCounts, float]], cache_mib: float) -> list[str]:
    """The rates some cell's time depends on: the read rates its cells' weights go at (read_rate_name), the
    arithmetic and the floor, and every additive rate some cell counts."""
    reads = {read_rate_name(counted, cache_mib * 2**20) for counted, _ in cells}
    return [name for name in RATES if name in reads or name in ("arithmetic", "layer floor")
            or (name not in ROOFLINE_RATES and any(counted.counts.get(name) for counted, _ in cells))]


def fit(cells: list[tuple[TimeCounts, float]], cache_mib: float, drop: str | None = None) -> dict[str, float | None]:
    """Rates for `cells` ((counts, measured seconds per iteration)) of one machine type: None for a rate no cell
    measures, 0 for `drop` (a term left out: the check that each is needed)."""
    from scipy.optimize import least_squares

    names = [name for name in measured_by(cells, cache_mib) if name != drop]

    def residuals(logs: np.ndarray) -> list[float]:
        rates = dict(zip(names, np.exp(logs))) | ({drop: 0.0} if drop else {})
        return [math.log(seconds(counted, rates, cache_mib) / measured) for counted, measured in cells]

    fitted = dict(zip(names, np.exp(least_squares(residuals, np.log([RATES[name][1] for name in names])).x)))
    return {name: 0.0 if name == drop else round(float(fitted[name]), 6) if name in fitted else None
            for name in RATES}


def fit_types(found: list[dict[str, Any]], kind_of: Any, drop: str | None = None) -> dict[str, dict[str, Any]]:
    """Per machine type among the rows (bench/scaling/fit.py's rows(); `kind_of(record)` names a row's type): its
    rates, last-level cache, median speed probe and cell count."""
    kinds = sorted({kind_of(row["record"]) for row in found})
    types = {}
    for kind in kinds:
        mine = [row for row in found if kind_of(row["record"]) == kind]
        cache = LAST_LEVEL_CACHE_MIB.get(mine[0]["record"]["machine"]["cpu"], 0)
        cells = [(time_counts(row["load"], row["shape"]), row["record"]["seconds_per_iteration"]) for row in mine]
        types[kind] = {"rates": fit(cells, cache, drop), "last_level_cache_mib": cache,
                       "probe_s": statistics.median(row["record"]["speed_probe"]["probe_s"] for row in mine),
                       "cells": len(mine)}
    return types


def summary(held_out: dict[str, dict[str, Any]]) -> str:
    """One line: the worst time error per shape left out, largest first (coefficients.json's held_out_error
    by_shape; what bench/scaling/README.md quotes)."""
    shapes = sorted(held_out, key=lambda shape: -held_out[shape]["time"])
    return "; ".join(f"{shape} {held_out[shape]['time']:.0%}" for shape in shapes)

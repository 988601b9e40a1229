"""The estimate's time model (evotune.estimate.roofline) and its fit (bench/scaling/roofline.py): a projection is
read-bound over few rows and compute-bound over many, a layer never takes less than its floor, weights in the cache
read at the cache's rate, a rate no cell measures is left unfitted with the plain read rate standing in, and
bench/scaling/README.md quotes the fit the committed coefficients hold."""

from __future__ import annotations

import pytest

from bench.claims._common import ROOT
from bench.scaling import roofline
from evotune.estimate.model import load_coefficients
from evotune.estimate.roofline import RATES, TimeCounts, time_parts

RATES_AT = {name: 0.0 for name in RATES} | {"weight reads": 10.0, "cached weight reads": 40.0, "arithmetic": 100.0}
MIB = 2**20


def projection(rows: int, size: int = 1000) -> TimeCounts:
    """One pass of one size x size float32 projection over `rows` rows (alone, like the LM head: no layer floor),
    nothing else counted."""
    return TimeCounts(passes=((1.0, ((4.0 * size * size, 2.0 * rows * size * size),)),), weight_bytes=4.0 * size * size,
                      stacked=False, counts={})


def seconds(counted: TimeCounts, rates: dict, cache_mib: float = 0.0) -> float:
    return roofline.seconds(counted, rates, cache_mib)


def test_a_projection_is_read_bound_over_few_rows_and_compute_bound_over_many():
    # 4 MB at 10 GB/s: 0.4 ms whatever the rows while their FLOPs take less (2 GFLOP per 1,000 rows at 100 GFLOP/s)
    assert seconds(projection(1), RATES_AT) == pytest.approx(4e6 / 10e9)
    assert seconds(projection(10), RATES_AT) == pytest.approx(4e6 / 10e9)
    assert seconds(projection(1000), RATES_AT) == pytest.approx(2e9 / 100e9)  # 20 ms: the arithmetic's
    # weights that fit in the cache read at its rate (4 MB in a 32 MiB cache, 40 GB/s)
    assert seconds(projection(1), RATES_AT, cache_mib=32) == pytest.approx(4e6 / 40e9)


def test_a_layer_takes_at_least_its_floor_and_the_lm_head_none():
    layer = TimeCounts(passes=((3.0, ((4.0, 2.0), (4.0, 2.0))),), weight_bytes=8.0, stacked=False, counts={})
    head = TimeCounts(passes=((3.0, ((4.0, 2.0),)),), weight_bytes=4.0, stacked=False, counts={})
    floored = RATES_AT | {"layer floor": 2.0}  # ms
    assert seconds(layer, floored) == pytest.approx(3 * 2e-3)
    assert seconds(head, floored) == pytest.approx(3 * 4.0 / 10e9)


def test_an_additive_term_whose_rate_no_cell_measured_leaves_its_part_unknown():
    counted = TimeCounts(passes=(), weight_bytes=0.0, stacked=False, counts={"training": 2.0, "KV cache reads": 0.0})
    parts = time_parts(counted, RATES_AT | {"training": None, "KV cache reads": None}, 0.0)
    assert parts["training"] is None and parts["KV cache reads"] == 0.0  # a term this iteration does not count


def test_a_rate_no_cell_measures_is_left_unfitted_and_the_plain_read_rate_stands_in():
    cells = [(TimeCounts(passes=((1.0, ((4e6 * k, 2e6 * k),)),), weight_bytes=4e6 * k, stacked=False,
                         counts={"training": 0.0}), 4e-4 * k) for k in (1, 2, 3)]
    rates = roofline.fit(cells, cache_mib=0.0)
    assert rates["cached weight reads"] is None and rates["stacked weight reads"] is None
    assert rates["training"] is None
    assert rates["weight reads"] == pytest.approx(10.0, rel=1e-3)  # 4 MB in 0.4 ms
    assert seconds(cells[0][0], rates, cache_mib=32) == pytest.approx(4e-4, rel=1e-3)  # in cache: no cached rate


def test_the_readme_quotes_the_committed_fit():
    """Each figure bench/scaling/README.md gives for the roofline is the committed coefficients'."""
    coefficients = load_coefficients()
    text = " ".join((ROOT / "bench" / "scaling" / "README.md").read_text().split())
    assert roofline.summary(coefficients["held_out_error"]["by_shape"]) in text
    rates = {kind.split(" |")[0]: typed["rates"] for kind, typed in coefficients["machine_types"].items()}
    epyc, xeon = rates["AMD EPYC"], rates["Intel(R) Xeon(R) Processor"]
    assert (f"the EPYC reads weights at {epyc['weight reads']:.1f} GB/s and multiplies at {epyc['arithmetic']:.0f} "
            f"GFLOP/s, the Xeon at {xeon['weight reads']:.0f} GB/s and {xeon['arithmetic']:.0f} GFLOP/s "
            f"({xeon['cached weight reads']:.0f} GB/s from its cache)") in text
    assert f"its worst error in sample is {100 * coefficients['worst_error']['time']:.0f}%" in text

"""bench/scaling/roofline.py: a projection is read-bound over few rows and compute-bound over many, a layer never
takes less than its floor, a rate no cell measures is left unfitted, and bench/scaling/README.md quotes the fit the
committed cells give (its errors per shape left out and its rates)."""

from __future__ import annotations

import pytest

from bench.claims._common import ROOT
from bench.scaling import roofline
from bench.scaling.fit import rows
from bench.scaling.roofline import RATES, Cell, errors, fit, seconds

RATES_AT = {name: 1.0 for name in RATES} | {"weight reads": 10.0, "arithmetic": 100.0, "layer floor": 0.0}


def projection(rows_: int, size: int = 1000) -> Cell:
    """One pass of one layer of one size x size float32 projection over `rows_` rows, nothing else counted."""
    return Cell(passes=[(1.0, [(4.0 * size * size, 2.0 * rows_ * size * size)])], cached=False, stacked=False,
                counts={}, measured=1.0)


def test_a_projection_is_read_bound_over_few_rows_and_compute_bound_over_many():
    # 4 MB at 10 GB/s: 0.4 ms, whatever the rows while their FLOPs take less (2 GFLOP per 1,000 rows at 100 GFLOP/s)
    assert seconds(projection(1), RATES_AT) == pytest.approx(4e6 / 10e9)
    assert seconds(projection(10), RATES_AT) == pytest.approx(4e6 / 10e9)
    assert seconds(projection(1000), RATES_AT) == pytest.approx(2e9 / 100e9)  # 20 ms: the arithmetic's


def test_a_layer_takes_at_least_its_floor_and_the_lm_head_none():
    layer = Cell(passes=[(3.0, [(4.0, 2.0), (4.0, 2.0)])], cached=False, stacked=False, counts={}, measured=1.0)
    head = Cell(passes=[(3.0, [(4.0, 2.0)])], cached=False, stacked=False, counts={}, measured=1.0)
    floored = RATES_AT | {"layer floor": 2.0}  # ms
    assert seconds(layer, floored) == pytest.approx(3 * 2e-3)
    assert seconds(head, floored) == pytest.approx(3 * 4.0 / 10e9)


def test_a_rate_no_cell_measures_is_left_unfitted_and_the_plain_read_rate_stands_in():
    cells = [Cell(passes=[(1.0, [(4e6 * k, 2e6 * k)])], cached=False, stacked=False, counts={"SFT step": 0.0},
                  measured=4e-4 * k) for k in (1, 2, 3)]
    rates = fit(cells)
    assert rates["cached weight reads"] is None and rates["stacked weight reads"] is None and rates["SFT step"] is None
    assert rates["weight reads"] == pytest.approx(10.0, rel=1e-3)  # 4 MB in 0.4 ms
    cached = Cell(passes=cells[0].passes, cached=True, stacked=False, counts={}, measured=4e-4)
    assert errors([cached], rates)[0] == pytest.approx(0.0, abs=1e-3)


def test_the_readme_quotes_the_fit_of_the_committed_cells():
    """Each figure bench/scaling/README.md gives for the roofline is the one its command prints now."""
    found = rows()
    text = " ".join((ROOT / "bench" / "scaling" / "README.md").read_text().split())
    assert roofline.summary(found) in text
    fitted = {kind.split(" |")[0]: fit([found_cell for _, _, found_cell in typed])
              for kind, typed in roofline.by_type(found).items()}
    epyc, xeon = fitted["AMD EPYC"], fitted["Intel(R) Xeon(R) Processor"]
    assert (f"the EPYC reads weights at {epyc['weight reads']:.1f} GB/s and multiplies at {epyc['arithmetic']:.0f} "
            f"GFLOP/s, the Xeon at {xeon['weight reads']:.0f} GB/s and {xeon['arithmetic']:.0f} GFLOP/s "
            f"({xeon['cached weight reads']:.0f} GB/s from its cache)") in text
    for kind, typed in roofline.by_type(found).items():
        worst = max(map(abs, errors([found_cell for _, _, found_cell in typed], fitted[kind.split(" |")[0]])))
        name = "EPYC" if kind.startswith("AMD") else "Xeon"
        assert f"{100 * worst:.0f}% ({name})" in text

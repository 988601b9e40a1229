"""`evotune sweep --parallel`: grid runs as Ray tasks give the same runs as one after another; a failed run
is reported by name after the others finished, and a re-run skips what finished."""

from __future__ import annotations

import json

import pytest
from helpers import TINY_EVAL_BUDGET, requires_ray

from evotune.errors import EvotuneError
from evotune.runs.sweep_grid import parse_grid
from evotune.sweep import sweep

# one Ray (2 CPUs) for the module, in the engine tier
pytestmark = [*requires_ray, pytest.mark.usefixtures("ray_instance"), pytest.mark.engine]


def base(model_dir: str) -> dict:
    return dict(model=model_dir, task="conciseness", population_size=2, iterations=2, batch_size=2, max_new_tokens=3,
                num_eval=2, eval_every=1, learning_rate=0.05, dtype="float32", report_to=[],
                eval_max_new_tokens=TINY_EVAL_BUDGET)


def evaluations(path) -> list[dict]:
    """Every logged metric that does not measure time or memory."""
    skip = ("time", "rss", "per_s", "cpu_s")
    return [{key: value for key, value in json.loads(line).items() if not any(word in key for word in skip)}
            for line in path.read_text().splitlines()]


@pytest.mark.slow  # CI runs parallel points in test_sweep_bookkeeping.py (a failing parallel point)
def test_parallel_runs_equal_sequential_runs(tiny_model_dir, tmp_path):
    grid = parse_grid(["sigma=0.01,0.05"])
    one_by_one = sweep(base(tiny_model_dir), grid, [0], tmp_path / "sequential")
    at_once = sweep(base(tiny_model_dir), grid, [0], tmp_path / "parallel", parallel=2)  # both points at once
    assert len(at_once["rows"]) == 2 and at_once["rows"] == [{**row, "time_s_mean": new["time_s_mean"]}
                               for row, new in zip(one_by_one["rows"], at_once["rows"])]
    runs = sorted((tmp_path / "sequential").glob("*/*/metrics.jsonl"))
    assert len(runs) == 2
    for metrics in runs:
        twin = tmp_path / "parallel" / metrics.relative_to(tmp_path / "sequential")
        assert evaluations(twin) == evaluations(metrics) and len(evaluations(metrics)) == 3


def test_a_failed_parallel_run_is_named_and_the_others_are_kept(tiny_model_dir, tmp_path, capsys):
    grid = parse_grid([f"model={tiny_model_dir},{tmp_path / 'no-such-model'}"])
    with pytest.raises(EvotuneError, match=r"1 of 2 sweep runs failed.*no-such-model seed 0"):
        sweep(base(tiny_model_dir), grid, [0], tmp_path / "sweep", parallel=2)
    finished = list((tmp_path / "sweep").glob("*/seed0/final"))
    assert len(finished) == 1 and "no-such-model" not in str(finished[0])
    capsys.readouterr()
    with pytest.raises(EvotuneError, match="1 of 1 sweep runs failed"):  # the finished run is not run again
        sweep(base(tiny_model_dir), grid, [0], tmp_path / "sweep", parallel=2)
    assert "skipped (done)" in capsys.readouterr().out

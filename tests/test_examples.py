"""examples/quickstart.py runs the quickstart's settings (README calls it "the same from Python"): run at a tiny
budget on the tiny model, every setting it did not override is the quickstart's, and its final/ loads."""

from __future__ import annotations

import runpy
from pathlib import Path

from helpers import TINY_EVAL_BUDGET

from evotune.config import QUICKSTART

ROOT = Path(__file__).resolve().parents[1]


def test_the_python_quickstart_runs_the_quickstarts_settings(tiny_model_dir, tmp_path):
    example = runpy.run_path(str(ROOT / "examples" / "quickstart.py"), run_name="example")
    tiny = {"model": tiny_model_dir, "iterations": 1, "population_size": 2, "batch_size": 2,
            "max_new_tokens": 4, "num_eval": 2, "eval_max_new_tokens": TINY_EVAL_BUDGET, "report_to": []}
    trainer = example["main"](str(tmp_path / "run"), **tiny)
    config = trainer.config.to_dict()
    assert {key: config[key] for key in QUICKSTART if key not in tiny} == {
        key: value for key, value in QUICKSTART.items() if key not in tiny}
    assert set(QUICKSTART) - set(tiny) >= {"sigma", "learning_rate", "antithetic", "noise", "eval_every"}
    assert (tmp_path / "run" / "final" / "config.json").exists()

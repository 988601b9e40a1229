"""examples/quickstart.py runs the quickstart's settings (README calls it "the same from Python"): run at a tiny
budget on the tiny model, every setting it did not override is the quickstart's, and its final/ loads."""

from __future__ import annotations

import runpy
from pathlib import Path

from helpers import TINY_EVAL_BUDGET

from evotune.config import QUICKSTART, TrainConfig

ROOT = Path(__file__).resolve().parents[1]


def test_the_python_quickstart_runs_the_quickstarts_settings(tiny_model_dir, tmp_path):
    example = runpy.run_path(str(ROOT / "examples" / "quickstart.py"), run_name="example")
    tiny = {"model": tiny_model_dir, "iterations": 1, "population_size": 2, "batch_size": 2,
            "max_new_tokens": 4, "num_eval": 2, "eval_max_new_tokens": TINY_EVAL_BUDGET, "report_to": []}
    trainer = example["main"](str(tmp_path / "run"), **tiny)
    config = trainer.config.to_dict()
    quickstart = TrainConfig.from_dict(QUICKSTART).to_dict()  # the quickstart's keys, then its method's defaults
    assert {key: config[key] for key in quickstart if key not in tiny and key != "dtype"} == {  # dtype: resolved
        key: value for key, value in quickstart.items() if key not in tiny and key != "dtype"}
    assert config["method"] == "lowrank-es" and config["sigma"] == 2e-3 and config["learning_rate"] == 1.6e-2
    assert (tmp_path / "run" / "final" / "config.json").exists()


def test_the_lowrank_example_is_the_quickstart_written_out():
    """The file spells out the method's defaults that the quickstart leaves to its method: the same run."""
    import yaml

    values = yaml.safe_load((ROOT / "examples" / "lowrank_arithmetic.yaml").read_text())
    assert TrainConfig.from_dict(values).to_dict() == TrainConfig.from_dict(QUICKSTART).to_dict()
    assert set(values) - set(QUICKSTART) >= {"sigma", "learning_rate", "antithetic", "noise", "population_size"}


# examples/<file>: the method study's method whose chosen setting it runs (bench/method_matrix/: its keys, then the
# tuning setting with the best validation accuracy), and the keys that make up the method there
STUDY_EXAMPLES = {"lowrank_arithmetic.yaml": "lowrank", "essa_arithmetic.yaml": "essa",
                  "grpo_arithmetic.yaml": "grpo_lora"}
METHOD_KEYS = ("space", "strategy", "perturbation_rank", "population_size", "batch_size", "sigma", "learning_rate",
               "svd_offsets", "singular_value_fraction", "antithetic", "noise", "num_generations", "temperature",
               "beta", "lora", "lora_rank")


def test_each_arithmetic_example_runs_the_method_studys_chosen_setting_at_a_budget_that_cuts_no_answer():
    import yaml

    from bench.method_matrix.arms import MAX_NEW_TOKENS, METHODS, SFT
    from bench.method_matrix.run import selection

    results = ROOT / "bench" / "results" / "method_matrix"
    from evotune.config.grpo import GRPORunConfig

    for name, method in STUDY_EXAMPLES.items():
        values = yaml.safe_load((ROOT / "examples" / name).read_text())
        config_class = GRPORunConfig if METHODS[method]["command"] == "grpo" else TrainConfig
        example = config_class.from_dict(values).to_dict()  # what the example runs, its defaults included
        chosen = {**METHODS[method]["keys"], **METHODS[method]["grid"][selection(results, method)]}
        differing = {key: (example[key], chosen[key]) for key in METHOD_KEYS
                     if key in chosen and example[key] != chosen[key]}
        assert differing == {}, f"{name} differs from the study's {method}: {differing}"
        assert example["max_new_tokens"] == MAX_NEW_TOKENS, name
    sft = yaml.safe_load((ROOT / "examples" / "sft_arithmetic.yaml").read_text())
    assert {key: sft[key] for key in ("num_train", "epochs", "batch_size", "learning_rate", "lora_rank")} == {
        key: SFT[key] for key in ("num_train", "epochs", "batch_size", "learning_rate", "lora_rank")}
    assert sft["max_new_tokens"] == MAX_NEW_TOKENS

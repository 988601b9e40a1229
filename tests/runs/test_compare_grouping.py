"""`evotune compare` pools only runs of one method (issue 28, items 1, 5 and 6): runs group by their whole config
minus the seed, a directory counts once however it is spelled, `--label DIR=NAME` names a method (and says when it
pools different configs), budgets are refused by flag before anything is written, a run with no evaluation within a
budget shows "-", and a relative adapter is found from the run directory or named as missing.

The run directories are written by the tests as `evotune train` / `grpo` / `sft` leave them (config.yaml with every
key, metrics.jsonl), so each case is a config that differs in exactly the key under test."""

from __future__ import annotations

import json
import math
import os

import pytest
import yaml
from helpers import TINY_EVAL_BUDGET

from evotune.baselines.grpo import GRPORunConfig
from evotune.cli.main import main
from evotune.config import TrainConfig
from evotune.errors import ConfigError
from evotune.runs.compare import compare_runs
from evotune.sft import SFTConfig
from evotune.trainer import Trainer


def write_run(directory, config: dict, accuracies: list[float], seconds_per_step: float = 10.0,
              initial_evaluation: bool = True) -> str:
    """A run directory: config.yaml as given, an evaluation per step (100 samples and `seconds_per_step` each)."""
    directory.mkdir(parents=True)
    (directory / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    records = [{"iteration": 0, "eval/accuracy": accuracies[0]}] if initial_evaluation else []
    for step, accuracy in enumerate(accuracies[1:] if initial_evaluation else accuracies, start=1):
        records.append({"iteration": step, "samples_seen": 100 * step, "time_s": seconds_per_step,
                        "eval/accuracy": accuracy})
    (directory / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    return str(directory)


def es_config(**overrides) -> dict:
    """config.yaml of an `evotune train` run (every key, as the trainer writes it)."""
    return TrainConfig(**{"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "task": "arithmetic", "num_eval": 100,
                          **overrides}).to_dict()


def grpo_config(**overrides) -> dict:
    return GRPORunConfig(**{"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "task": "arithmetic", "num_eval": 100,
                            **overrides}).to_dict()


def sft_run(directory, steps: int = 2, **overrides) -> str:
    """An `evotune sft` run directory (config.yaml, per-step metrics with 3 s per step, adapter/); its adapter."""
    config = SFTConfig(model="HuggingFaceTB/SmolLM2-135M-Instruct", task="arithmetic", **overrides).to_dict()
    records = [{"step": step, "loss": 1.0 / step, "time_s": 3.0} for step in range(1, steps + 1)]
    write_run(directory, config, [0.3])
    with open(directory / "metrics.jsonl", "a") as metrics:
        metrics.write("".join(json.dumps(record) + "\n" for record in records))
    (directory / "adapter").mkdir()
    (directory / "adapter" / "adapter_config.json").write_text("{}")
    return str(directory / "adapter")


def rows(result: dict) -> dict[str, dict]:
    return {row["method"]: row for row in result["methods"]}


# --- item 1: only runs of one method share a row -----------------------------------------------------------------


def test_runs_that_differ_in_more_than_the_seed_are_separate_rows_named_by_the_keys(tmp_path):
    runs = [write_run(tmp_path / "sigma1", es_config(sigma=0.001), [0.1, 0.2]),
            write_run(tmp_path / "sigma2", es_config(sigma=0.002), [0.1, 0.6]),
            write_run(tmp_path / "long", es_config(sigma=0.001, iterations=20), [0.1, 0.4]),
            write_run(tmp_path / "other_model", es_config(sigma=0.001, model="Qwen/Qwen2.5-0.5B"), [0.1, 0.5])]
    result = compare_runs(runs, tmp_path / "out")
    assert [row["runs"] for row in result["methods"]] == [1, 1, 1, 1]  # all seed 0: four methods, not one
    labels = list(rows(result))
    assert labels[1] == "full-es model=HuggingFaceTB/SmolLM2-135M-Instruct sigma=0.002 iterations=100"
    assert "iterations=20" in labels[2] and "model=Qwen/Qwen2.5-0.5B" in labels[3]
    note = next(note for note in result["notes"] if "differ in" in note)
    assert "model, sigma, iterations" in note and "--label DIR=NAME" in note
    markdown = (tmp_path / "out" / "compare.md").read_text()
    assert "sigma=0.002" in markdown and "--label DIR=NAME" in markdown


def test_seeds_of_one_method_share_a_row_whatever_their_logging_and_placement(tmp_path):
    """Logging, evaluation/checkpoint cadence and Ray placement cannot change the result: seeds stay pooled."""
    runs = [write_run(tmp_path / "seed0", es_config(seed=0), [0.1, 0.2]),
            write_run(tmp_path / "seed1", es_config(seed=1, report_to=[], eval_every=1, checkpoint_every=5,
                                                    log_samples=0, distributed="ray", workers=2,
                                                    ray_address="auto", worker_num_cpus=2.0), [0.1, 0.4])]
    result = compare_runs(runs, tmp_path / "out")
    (row,) = result["methods"]
    assert (row["method"], row["runs"], row["final_mean"]) == ("full-es", 2, pytest.approx(0.3))
    assert result["notes"] == []


def test_one_directory_given_several_ways_counts_once(tmp_path, monkeypatch):
    """The same run as a, ./a, its absolute path and a symlink to it: one run, so the interval does not narrow."""
    run = write_run(tmp_path / "a", es_config(), [0.1, 0.2])
    os.symlink(tmp_path / "a", tmp_path / "link")
    monkeypatch.chdir(tmp_path)
    once = compare_runs(["a"], tmp_path / "once")["methods"][0]
    result = compare_runs(["a", "./a", run, "link", "a/"], tmp_path / "out")
    (row,) = result["methods"]
    assert row["runs"] == 1 and row["final_ci95"] == once["final_ci95"]
    assert len(result["runs"]) == 1
    assert any("given 5 times" in note and "counts once" in note for note in result["notes"])


def test_grpo_runs_from_different_adapters_are_different_rows(tmp_path):
    """Adapters of SFT runs with other settings, or bare adapters at other paths, are other starting points."""
    fast, slow = sft_run(tmp_path / "sft_fast", learning_rate=1e-3), sft_run(tmp_path / "sft_slow", learning_rate=1e-4)
    runs = [write_run(tmp_path / "grpo_fast", grpo_config(adapter=fast), [0.3, 0.4]),
            write_run(tmp_path / "grpo_slow", grpo_config(adapter=slow, seed=1), [0.3, 0.35])]
    result = compare_runs(runs, tmp_path / "out")
    assert list(rows(result)) == ["grpo-lora adapter.learning_rate=0.001", "grpo-lora adapter.learning_rate=0.0001"]
    for name in ("bare1", "bare2"):  # adapters that no evotune run made: told apart by their path
        (tmp_path / name / "adapter").mkdir(parents=True)
    runs = [write_run(tmp_path / f"grpo_{name}", grpo_config(adapter=str(tmp_path / name / "adapter")), [0.3, 0.4])
            for name in ("bare1", "bare2")]
    assert list(rows(compare_runs(runs, tmp_path / "out2"))) == ["grpo-lora adapter=bare1/adapter",
                                                                 "grpo-lora adapter=bare2/adapter"]


def test_each_seed_from_its_own_seeds_sft_adapter_is_one_method(tmp_path):
    """ESSA's recipe: seed S continues the adapter of SFT seed S; the SFT runs differ only in the seed."""
    runs = []
    for seed in (0, 1):
        adapter = sft_run(tmp_path / f"sft-seed{seed}", seed=seed)
        runs.append(write_run(tmp_path / f"essa-seed{seed}", es_config(space="svd_lora", strategy="cma", seed=seed,
                                                                        adapter=adapter), [0.3, 0.4 + seed / 10]))
    (row,) = compare_runs(runs, tmp_path / "out")["methods"]
    assert (row["method"], row["runs"], row["warm_start_steps"], row["warm_start_time_s"]) == \
        ("essa", 2, 2, 6.0)


def test_a_repeated_seed_is_pooled_but_named(tmp_path):
    """Two directories of one config and seed are repeats, not two seeds: the row says its spread is too narrow."""
    runs = [write_run(tmp_path / "first", es_config(), [0.1, 0.2]),
            write_run(tmp_path / "again", es_config(), [0.1, 0.2])]
    result = compare_runs(runs, tmp_path / "out")
    assert result["methods"][0]["runs"] == 2
    assert any("share a seed" in note and "first" in note and "again" in note for note in result["notes"])


# --- item 1: --label names a method --------------------------------------------------------------------------


def test_label_pools_runs_of_different_configs_and_says_so(tmp_path, capsys):
    runs = [write_run(tmp_path / "sigma1", es_config(sigma=0.001), [0.1, 0.2]),
            write_run(tmp_path / "sigma2" / "sigma=0.002,seed=1", es_config(sigma=0.002, seed=1), [0.1, 0.4]),
            write_run(tmp_path / "grpo", grpo_config(), [0.1, 0.3])]
    assert main(["compare", *runs, "--output-dir", str(tmp_path / "out"), "--label", f"{runs[0]}=es",
                 "--label", f"{runs[1]}=es", "--label", f"{runs[2]}=grpo baseline"]) == 0
    captured = capsys.readouterr()
    assert "| es | 2 |" in captured.out and "| grpo baseline | 1 |" in captured.out
    assert "--label `es` pools 2 runs whose configs differ in sigma" in " ".join(captured.out.split())
    result = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert [run["label"] for run in result["runs"]] == ["es", "es", "grpo baseline"]


@pytest.mark.parametrize("label, expected", [
    ("{elsewhere}=x", "--label {elsewhere}=x: pass DIR=NAME where DIR is one of the run directories given"),
    ("{a}", "pass DIR=NAME"),
    ("{a}=", "NAME after `=` is empty"),
    ("{a}=x --label {a}/=y", "two names ('x' and 'y')"),
    ("{a}=full-es", "is also the row of {b}"),
])
def test_a_bad_label_is_refused_before_anything_is_written(tmp_path, capsys, label, expected):
    a = write_run(tmp_path / "a", es_config(sigma=0.001), [0.1, 0.2])
    b = write_run(tmp_path / "b", es_config(), [0.1, 0.2])  # unlabelled: its row is "full-es"
    paths = {"a": a, "b": b, "elsewhere": str(tmp_path / "elsewhere")}
    labels = [part for text in label.format(**paths).split(" --label ") for part in ("--label", text)]
    assert main(["compare", a, b, "--output-dir", str(tmp_path / "out"), *labels]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert expected.format(**paths) in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


# --- item 5: budgets ------------------------------------------------------------------------------------------


def test_budget_time_before_a_runs_first_evaluation_shows_a_dash(tmp_path, capsys):
    """A GRPO run evaluates first after its first 30 s step: at 25 s it has no value, which must not crash."""
    runs = [write_run(tmp_path / "es", es_config(), [0.1, 0.2, 0.3]),
            write_run(tmp_path / "grpo0", grpo_config(), [0.4, 0.5], seconds_per_step=30.0, initial_evaluation=False),
            write_run(tmp_path / "grpo1", grpo_config(seed=1), [0.3, 0.4], initial_evaluation=False)]
    assert main(["compare", *runs, "--output-dir", str(tmp_path / "out"), "--budget-time", "25", "--budget", "50"]) == 0
    captured = capsys.readouterr()
    es, grpo = json.loads((tmp_path / "out" / "compare.json").read_text())["methods"]
    assert es["at_25s"] == pytest.approx(0.3) and grpo["at_25s_per_seed"] == [None, 0.4]
    assert grpo["at_25s"] is None and grpo["at_25s_std"] is None and grpo["at_50_samples"] is None
    markdown = (tmp_path / "out" / "compare.md").read_text()
    assert markdown in captured.out + "\n" and "| - |" in markdown and "[-, 0.400]" in markdown
    notes = " ".join(markdown.split())
    assert f"`grpo-lora` at_25s: {runs[1]} (first at 30 s) had no evaluation within 25 s of training" in notes
    assert "at_50_samples" in notes and f"{runs[2]} (first at 100 sampled completions)" in notes


@pytest.mark.parametrize("flag, value, expected", [
    ("--budget", "-5", "--budget -5: give a number of sampled completions, a whole number >= 0"),
    ("--budget-time", "0", "--budget-time 0.0: give a positive, finite number of seconds"),
    ("--budget-time", "-5", "--budget-time -5.0: give a positive, finite number of seconds"),
    ("--budget-time", "nan", "--budget-time nan: give a positive, finite number of seconds"),
    ("--budget-time", "inf", "--budget-time inf: give a positive, finite number of seconds"),
    ("--target", "nan", "--target nan: give the metric value to reach, a finite number"),
])
def test_a_bad_budget_is_refused_before_anything_is_written(tmp_path, capsys, flag, value, expected):
    run = write_run(tmp_path / "a", es_config(), [0.1, 0.2])
    output = tmp_path / "out"
    output.mkdir()
    (output / "compare.md").write_text("an earlier comparison")
    assert main(["compare", run, "--output-dir", str(output), flag, value]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert expected in err and "Traceback" not in err
    assert sorted(path.name for path in output.iterdir()) == ["compare.md"]  # no PNG, no JSON
    assert (output / "compare.md").read_text() == "an earlier comparison"


def test_a_bad_budget_from_the_api_names_the_flag(tmp_path):
    run = write_run(tmp_path / "a", es_config(), [0.1, 0.2])
    for keyword, value in (("budget", 2.5), ("budget", True), ("budget_time", math.nan), ("target", math.inf)):
        with pytest.raises(ConfigError, match=f"--{keyword.replace('_', '-')} "):
            compare_runs([run], tmp_path / "out", **{keyword: value})
    assert not (tmp_path / "out").exists()


# --- item 6: relative adapter paths in config.yaml ------------------------------------------------------------


def essa_run(tmp_path, adapter: str) -> str:
    return write_run(tmp_path / "gr" / "essa", es_config(space="svd_lora", strategy="cma", adapter=adapter),
                     [0.3, 0.4])


def test_an_adapter_relative_to_the_run_directory_is_found_from_anywhere(tmp_path, monkeypatch):
    sft_run(tmp_path / "gr" / "sft1")
    run = essa_run(tmp_path, "../sft1/adapter")  # run-relative, as a run started elsewhere may store it
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    result = compare_runs([run], tmp_path / "out")
    (row,) = result["methods"]
    assert (row["warm_start_steps"], row["warm_start_time_s"]) == (2, 6.0) and result["notes"] == []


def test_an_adapter_relative_to_where_the_run_started_is_found_there_and_named_elsewhere(tmp_path, monkeypatch):
    sft_run(tmp_path / "gr" / "sft1")
    run = essa_run(tmp_path, "gr/sft1/adapter")  # relative to tmp_path, where the run was started
    monkeypatch.chdir(tmp_path)
    assert compare_runs([run], tmp_path / "out")["methods"][0]["warm_start_steps"] == 2
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    result = compare_runs([run], tmp_path / "out2")
    assert "warm_start_steps" not in result["methods"][0]  # no columns, but not silently:
    note = " ".join(" ".join(result["notes"]).split())
    assert f"{tmp_path}/gr/essa/config.yaml: its adapter `gr/sft1/adapter` is missing" in note
    assert f"{tmp_path}/elsewhere/gr/sft1/adapter and {tmp_path}/gr/essa/gr/sft1/adapter do not exist" in note
    assert "adapter `gr/sft1/adapter` is missing" in (tmp_path / "out2" / "compare.md").read_text()


def test_a_missing_warm_start_record_is_named(tmp_path):
    """The adapter is there, but the SFT run's metrics.jsonl is gone; in a row whose other seed has one."""
    kept, lost = sft_run(tmp_path / "sft0"), sft_run(tmp_path / "sft1", seed=1)
    (tmp_path / "sft1" / "metrics.jsonl").unlink()
    runs = [write_run(tmp_path / f"essa{seed}", es_config(space="svd_lora", strategy="cma", adapter=adapter,
                                                          seed=seed), [0.3, 0.4])
            for seed, adapter in enumerate((kept, lost))]
    result = compare_runs(runs, tmp_path / "out")
    (row,) = result["methods"]
    assert row["runs"] == 2 and "warm_start_steps" not in row
    notes = " ".join(result["notes"])
    assert f"{tmp_path / 'sft1' / 'metrics.jsonl'} is missing" in notes
    assert f"warm-start columns left out, since {runs[1]} have no warm-start record" in notes


# --- real runs on the tiny model ------------------------------------------------------------------------------


def test_real_runs_of_two_sigmas_and_a_repeated_directory(tiny_model_dir, tmp_path, capsys):
    runs = []
    for name, sigma in (("sigma005", 0.05), ("sigma01", 0.1)):
        config = TrainConfig(model=tiny_model_dir, task="conciseness", population_size=4, antithetic=True,
                             sigma=sigma, learning_rate=0.05, iterations=2, batch_size=2, max_new_tokens=4,
                             num_eval=3, eval_every=1, dtype="float32", seed=0, report_to=[],
                             eval_max_new_tokens=TINY_EVAL_BUDGET)
        Trainer(config, tmp_path / name).train()
        runs.append(str(tmp_path / name))
    os.symlink(tmp_path / "sigma005", tmp_path / "again")
    assert main(["compare", *runs, str(tmp_path / "again"), "--output-dir", str(tmp_path / "cmp")]) == 0
    table = capsys.readouterr().out
    assert "| full-es sigma=0.05 | 1 |" in table and "| full-es sigma=0.1 | 1 |" in table
    assert "given 2 times" in " ".join(table.split())


def test_a_run_whose_adapter_is_its_own_output_is_read_once(tmp_path):
    """An adapter path that leads back to the run itself (a user's mistake) must not loop forever."""
    config = es_config(space="lora", adapter=str(tmp_path / "self" / "final"))
    run = write_run(tmp_path / "self", config, [0.1, 0.2])
    (tmp_path / "self" / "final").mkdir()
    (row,) = compare_runs([run], tmp_path / "out")["methods"]
    assert row["runs"] == 1


def test_methods_with_several_seeds_get_a_panel_each_beside_all_runs(tmp_path):
    import matplotlib.image

    runs = [write_run(tmp_path / f"{sigma}-{seed}", es_config(sigma=sigma, seed=seed), [0.1, 0.2 + seed / 10])
            for sigma in (0.001, 0.002) for seed in (0, 1)]
    compare_runs(runs, tmp_path / "seeds")
    compare_runs(runs[::2], tmp_path / "one_seed_each")  # one run per method: the single panel
    several = matplotlib.image.imread(tmp_path / "seeds" / "accuracy_vs_time.png")
    single = matplotlib.image.imread(tmp_path / "one_seed_each" / "accuracy_vs_time.png")
    assert several.shape[0] == single.shape[0] and several.shape[1] == 3 * single.shape[1]  # all, and 2 methods

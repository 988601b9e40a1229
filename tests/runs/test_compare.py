"""`evotune compare`: runs of several methods and seeds side by side, on samples and time; a torn or damaged
metrics file is skipped or named, and its JSON output is strict."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from helpers import TINY_EVAL_BUDGET, fake_run, strict_loads

from evotune.cli.main import main
from evotune.config import TrainConfig
from evotune.errors import ConfigError
from evotune.runs.compare import compare_runs, time_to_target
from evotune.trainer import Trainer


def write_run(directory, config: dict, records: list[dict]):
    directory.mkdir(parents=True)
    (directory / "config.yaml").write_text(yaml.safe_dump(config))
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(directory)


def synthetic(directory, method, seed, accuracies, samples_per_step=100, seconds_per_step=10.0, rss=500.0):
    records = [{"iteration": 0, "eval/accuracy": accuracies[0]}]
    for step, accuracy in enumerate(accuracies[1:], start=1):
        records.append({"iteration": step, "reward_mean": 0.0, "samples_seen": step * samples_per_step,
                        "time_s": seconds_per_step, "peak_rss_mib": rss + step, "eval/accuracy": accuracy})
    return write_run(directory, {"method": method, "seed": seed, "num_eval": 100}, records)


def test_table_spread_and_time_to_target(tmp_path):
    runs = [synthetic(tmp_path / "es0", "es", 0, [0.1, 0.2, 0.3]),
            synthetic(tmp_path / "es1", "es", 1, [0.1, 0.3, 0.5]),
            synthetic(tmp_path / "grpo0", "grpo", 0, [0.1, 0.15, 0.2], samples_per_step=50, seconds_per_step=30.0)]
    result = compare_runs(runs, str(tmp_path / "out"), target=0.3)
    es, grpo = result["methods"]
    assert (es["method"], es["runs"], grpo["runs"]) == ("es", 2, 1)
    assert es["final_mean"] == pytest.approx(0.4) and es["final_std"] == pytest.approx(0.1414, abs=1e-3)
    assert es["final_ci95"][0] < 0.4 < es["final_ci95"][1]  # pooled 200 held-out answers
    assert es["samples_seen"] == 200 and grpo["train_time_s"] == 60.0 and es["peak_rss_mib"] == 502.0
    # equal budget: GRPO spent 100 samples, so ES is read at its 100-sample evaluation (0.2 and 0.3)
    assert es["at_100_samples"] == pytest.approx(0.25) and grpo["at_100_samples"] == pytest.approx(0.2)
    assert es["reached_target"] == "2/2" and es["time_to_target_s"] == pytest.approx(15.0)  # 20 s and 10 s
    assert grpo["reached_target"] == "0/1" and grpo["time_to_target_s"] is None
    run = result["runs"][1]
    assert [p["samples"] for p in run["curve"]] == [0, 100, 200] and [p["time_s"] for p in run["curve"]] == [0, 10, 20]
    assert time_to_target(run, 0.25) == {"time_s": 10.0, "samples": 100}
    for name in ("compare.json", "compare.md", "accuracy_vs_samples.png", "accuracy_vs_time.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0


def test_warm_start_cost_is_reported(tmp_path):
    """ES on an `evotune sft` adapter shows the SFT steps and time it started from; others show nothing."""
    sft = tmp_path / "sft"
    write_run(sft, {"task": "arithmetic"}, [{"step": 1, "loss": 2.0, "time_s": 3.0},
                                            {"step": 2, "loss": 1.5, "time_s": 7.5},
                                            {"step": 2, "eval/accuracy": 0.4}])
    essa = synthetic(tmp_path / "essa", "essa", 0, [0.4, 0.5])
    config = yaml.safe_load((tmp_path / "essa" / "config.yaml").read_text())
    (tmp_path / "essa" / "config.yaml").write_text(yaml.safe_dump({**config, "adapter": str(sft / "adapter")}))
    result = compare_runs([synthetic(tmp_path / "es", "es", 0, [0.1, 0.2]), essa], str(tmp_path / "out"))
    es, essa_row = result["methods"]
    assert "warm_start_steps" not in es
    assert essa_row["warm_start_steps"] == 2 and essa_row["warm_start_time_s"] == 10.5  # per-step times, summed
    header = (tmp_path / "out" / "compare.md").read_text().splitlines()[2]
    assert "warm_start_time_s" in header


def test_compare_real_runs_from_the_cli(tiny_model_dir, tmp_path, capsys):
    runs = []
    for seed, space in ((0, "full"), (1, "full"), (0, "lora")):
        config = TrainConfig(model=tiny_model_dir, task="conciseness", space=space, population_size=4,
                             antithetic=True, sigma=0.05, learning_rate=0.05, iterations=2, batch_size=2,
                             max_new_tokens=4, num_eval=3, eval_every=1, dtype="float32", seed=seed, report_to=[],
                             eval_max_new_tokens=TINY_EVAL_BUDGET)
        Trainer(config, tmp_path / f"{space}{seed}").train()
        runs.append(str(tmp_path / f"{space}{seed}"))
    assert main(["compare", *runs, "--output-dir", str(tmp_path / "cmp")]) == 0
    table = capsys.readouterr().out
    assert "full-es | 2 |" in table and "lora-es | 1 |" in table
    result = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert result["metric"] == "eval/reward"
    assert [p["samples"] for p in result["runs"][0]["curve"]] == [0, 8, 16]  # 4 candidates x 2 prompts per step


def test_not_a_run_directory_and_missing_metric(tmp_path):
    with pytest.raises(ConfigError, match="not a run directory"):
        compare_runs([str(tmp_path)], str(tmp_path / "out"))
    run = synthetic(tmp_path / "r", "es", 0, [0.1, 0.2])
    with pytest.raises(ConfigError, match="no `eval/pass@4`"):
        compare_runs([run], str(tmp_path / "out"), metric="eval/pass@4")


def test_budget_time_reads_each_run_at_equal_training_time(tmp_path, capsys):
    runs = [synthetic(tmp_path / "es0", "es", 0, [0.1, 0.2, 0.3, 0.4]),  # evaluations at 0, 10, 20, 30 s
            synthetic(tmp_path / "es1", "es", 1, [0.1, 0.4, 0.4, 0.6]),
            synthetic(tmp_path / "grpo0", "grpo", 0, [0.1, 0.5, 0.7], seconds_per_step=30.0)]  # at 0, 30, 60 s
    assert main(["compare", *runs, "--output-dir", str(tmp_path / "out"), "--budget-time", "25"]) == 0
    es, grpo = json.loads((tmp_path / "out" / "compare.json").read_text())["methods"]
    assert es["at_25s_per_seed"] == [0.3, 0.4] and es["at_25s"] == pytest.approx(0.35)
    assert es["at_25s_std"] == pytest.approx(0.0707, abs=1e-4)
    assert grpo["at_25s"] == pytest.approx(0.1)  # GRPO's first evaluation after training came at 30 s
    assert "at_25s" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="positive"):
        compare_runs(runs, str(tmp_path / "out2"), budget_time=0)


# --- damaged inputs, strict output ---------------------------------------------------------------


def test_compare_skips_a_torn_last_line_and_writes_strict_json(tmp_path, capsys):
    runs = [fake_run(tmp_path / "a", [0.1, 0.2], tail='{"iteration": 2, "eval/acc'),
            fake_run(tmp_path / "b", [0.1, float("nan"), 0.3])]  # a NaN logged by an older evotune
    with pytest.warns(UserWarning, match="torn last record"):
        assert main(["compare", *runs, "--output-dir", str(tmp_path / "out")]) == 0
    result = strict_loads((tmp_path / "out" / "compare.json").read_text())
    assert [len(run["curve"]) for run in result["runs"]] == [2, 2]  # the torn line and the NaN point left out


def test_compare_output_that_is_a_file_is_refused_first(tmp_path, capsys):
    runs = [fake_run(tmp_path / "a", [0.1, 0.2])]
    target = tmp_path / "compare.txt"
    target.write_text("keep me")
    assert main(["compare", *runs, "--output-dir", str(target)]) == 2
    err = capsys.readouterr().err
    assert "is a file" in err and str(target) in err and "Traceback" not in err
    assert target.read_text() == "keep me"
    assert main(["compare", str(tmp_path / "a"), "--output-dir", str(target / "sub")]) == 2
    assert "is a file" in capsys.readouterr().err


def test_compare_names_a_damaged_metrics_or_config_file(tmp_path, capsys):
    broken = fake_run(tmp_path / "a", [0.1], tail="{garbage\n")
    assert main(["compare", broken, "--output-dir", str(tmp_path / "out")]) == 2
    assert "metrics.jsonl, line 2" in " ".join(capsys.readouterr().err.split())
    other = fake_run(tmp_path / "b", [0.1])
    (tmp_path / "b" / "config.yaml").write_bytes(b"method: \xff\xfe")
    assert main(["compare", other, "--output-dir", str(tmp_path / "out")]) == 2
    assert "config.yaml" in capsys.readouterr().err



def test_methods_with_several_seeds_show_each_seed_and_the_spread(tmp_path):
    runs = [synthetic(tmp_path / f"es{seed}", "es", seed, [0.1, final]) for seed, final in enumerate([0.2, 0.5, 0.3])]
    runs.append(synthetic(tmp_path / "grpo0", "grpo", 0, [0.1, 0.4]))
    result = compare_runs(runs, str(tmp_path / "out"))
    es, grpo = result["methods"]
    assert es["seeds"] == [0, 1, 2] and es["final_per_seed"] == pytest.approx([0.2, 0.5, 0.3])
    assert es["final_range"] == pytest.approx(0.3)
    low, high = es["final_std_ci95"]  # bootstrap over the 3 seeds: from 0 (all draws equal) up to the largest std
    assert low == pytest.approx(0.0) and es["final_std"] < high <= np.std([0.2, 0.5, 0.5], ddof=1) + 1e-9
    assert "final_per_seed" not in grpo and "final_range" not in grpo  # one run: no spread to show
    table = (tmp_path / "out" / "compare.md").read_text()
    assert "final_per_seed" in table and "[0.200, 0.500, 0.300]" in table and "| [0, 1, 2] |" in table


def test_drift_and_retention_metrics_can_be_compared_and_small_values_keep_their_digits(tmp_path):
    runs = []
    for seed, (l2, kl) in enumerate([(0.05, 0.0018), (0.07, 0.0042)]):
        records = [{"iteration": 0, "eval/accuracy": 0.2, "drift/l2": 0.0, "retain/ifeval/kl": 0.0}]
        records.append({"iteration": 1, "reward_mean": 0.1, "samples_seen": 10, "time_s": 5.0, "eval/accuracy": 0.3,
                        "drift/l2": l2, "retain/ifeval/kl": kl})
        runs.append(write_run(tmp_path / f"es{seed}", {"method": "es", "seed": seed, "num_eval": 100}, records))
    for metric, final in (("drift/l2", 0.06), ("retain/ifeval/kl", 0.003)):
        output = tmp_path / metric.replace("/", "_")
        result = compare_runs(runs, str(output), metric=metric)
        assert result["methods"][0]["final_mean"] == pytest.approx(final)
        assert (output / f"{metric.replace('/', '_')}_vs_samples.png").stat().st_size > 0
    from evotune.runs.compare_output import _cell

    assert _cell([0.0018, 0.0042]) == "[0.0018, 0.0042]" and _cell([0.5, 0.25]) == "[0.500, 0.250]"
    with pytest.raises(ConfigError, match="has no `drift/typo`"):
        compare_runs(runs, str(tmp_path / "bad"), metric="drift/typo")


def test_a_row_pooling_a_run_stopped_early_with_a_finished_one_says_so(tmp_path):
    """A seed killed at iteration 1 shares the row of a finished seed (same config): the row's final values come
    from different points of training, and a note says which runs stopped where."""
    finished = synthetic(tmp_path / "es0", "es", 0, [0.1, 0.2, 0.3, 0.4])
    killed = synthetic(tmp_path / "es1", "es", 1, [0.1, 0.15])
    alone = synthetic(tmp_path / "grpo0", "grpo", 0, [0.1, 0.2])
    result = compare_runs([finished, killed, alone], str(tmp_path / "out"))
    assert result["methods"][0]["runs"] == 2
    pooled = [note for note in result["notes"] if "completed different numbers of iterations" in note]
    assert len(pooled) == 1 and pooled[0].startswith("`es` pools")  # the grpo row has one run: no note
    assert f"{finished}: 3" in pooled[0] and f"{killed}: 1" in pooled[0]
    assert pooled[0] in (tmp_path / "out" / "compare.md").read_text()
    equal = compare_runs([finished, synthetic(tmp_path / "es2", "es", 2, [0.1, 0.3, 0.2, 0.5])], str(tmp_path / "eq"))
    assert not any("different numbers of iterations" in note for note in equal["notes"])


def test_reading_runs_imports_no_torch():
    """`evotune compare` and the run-directory helpers read JSON and YAML only: torch (seconds to import) stays out
    until a tensor is written or read."""
    import subprocess
    import sys

    script = ("import sys, evotune.runs.compare, evotune.runs.directory, evotune.runs.lifecycle; "
              "print(sorted(m for m in ('torch', 'transformers', 'safetensors.torch') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_runs_of_different_tasks_are_noted_as_such(tmp_path):
    """Arithmetic against conciseness with --metric eval/reward stood side by side with no note."""
    records = [{"iteration": 0, "eval/reward": 0.1}, {"iteration": 1, "reward_mean": 0.0, "samples_seen": 10,
                                                     "time_s": 1.0, "eval/reward": 0.2}]
    arithmetic = write_run(tmp_path / "arith", {"method": "lowrank-es", "task": "arithmetic", "seed": 0}, records)
    concise = write_run(tmp_path / "concise", {"method": "lowrank-es", "task": "conciseness", "seed": 1}, records)
    three = write_run(tmp_path / "three", {"method": "full-es", "task": "arithmetic", "task_args": {"digits": 3},
                                           "seed": 0}, records)
    result = compare_runs([arithmetic, concise, three], str(tmp_path / "out"), metric="eval/reward")
    notes = " ".join(result["notes"])
    assert "scored on 3 different tasks (arithmetic: " in notes and "arithmetic (digits=3): " in notes
    rows = [row["method"] for row in result["methods"]]
    assert len(rows) == 3 and any("task=" in row for row in rows)  # each task its own row, named by the key
    single = compare_runs([arithmetic], str(tmp_path / "out1"), metric="eval/reward")
    assert not any("different tasks" in note for note in single["notes"])

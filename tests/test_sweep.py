"""`evotune sweep`: grid parsing, one run per point and seed, finished points skipped on re-run, the table."""

from __future__ import annotations

import json

import pytest
from helpers import TINY_EVAL_BUDGET

from evotune.cli.main import main
from evotune.errors import ConfigError
from evotune.runs.sweep_grid import grid_points, parse_grid


def test_grid_parsing_reads_yaml_values_and_keeps_lists_whole():
    grid = parse_grid(["sigma=1e-3,2e-3", "antithetic=true,false", "lora_target_modules=[q_proj,v_proj],[o_proj]"])
    assert grid == [("sigma", [0.001, 0.002]), ("antithetic", [True, False]),
                    ("lora_target_modules", [["q_proj", "v_proj"], ["o_proj"]])]
    assert len(grid_points(grid)) == 8
    points = grid_points(parse_grid(["task_args={reward: digits},{reward: exact}", "parameters=[mlp],[self_attn]"]))
    assert len({point: None for point in points}) == 4  # list and dict values still key the runs
    assert grid_points(grid)[0].name == "sigma=0.001,antithetic=True,lora_target_modules=['q_proj', 'v_proj']"


@pytest.mark.parametrize("spec, message", [("sigma", "KEY=V1,V2"), ("sigma=", "KEY=V1,V2"),
                                           ("sigma=1,1", "repeats")])
def test_bad_grids_name_the_fix(spec, message):
    with pytest.raises(ConfigError, match=message):
        parse_grid([spec])


def test_sweep_runs_every_point_skips_finished_ones_and_writes_the_table(tiny_model_dir, tmp_path, capsys):
    output = tmp_path / "sweep"
    arguments = ["sweep", "--output-dir", str(output), "--grid", "sigma=0.01,0.05", "--grid", "learning_rate=0.0,0.05",
                 "--seeds", "0", "1", "--set", f"model={tiny_model_dir}", "--set", "task=conciseness",
                 "--set", "population_size=2", "--set", "iterations=1", "--set", "batch_size=2",
                 "--set", "max_new_tokens=3", "--set", "num_eval=2", "--set", "dtype=float32", "--set", "report_to=[]",
                 "--set", f"eval_max_new_tokens={TINY_EVAL_BUDGET}"]
    assert main(arguments) == 0
    runs = sorted(path.parent.parent.name + "/" + path.parent.name for path in output.glob("*/*/final"))
    assert len(runs) == 8 and "sigma=0.01,learning_rate=0.0/seed1" in runs
    result = json.loads((output / "sweep.json").read_text())
    assert result["metric"] == "eval/reward" and len(result["rows"]) == 4
    zero_rate = [row for row in result["rows"] if row["learning_rate"] == 0.0]
    # learning rate 0 moves nothing: the final held-out reward is the starting one, for every seed
    assert all(row["final_mean"] == row["start_mean"] for row in zero_rate)
    assert all(row["samples"] == 4 and row["time_s_mean"] > 0 for row in result["rows"])
    assert (output / "heatmap.png").stat().st_size > 0
    table = (output / "sweep.md").read_text()
    assert table.count("\n") == 6 and "final eval/reward" in table
    capsys.readouterr()

    mtimes = {path: path.stat().st_mtime_ns for path in output.glob("*/*/metrics.jsonl")}
    assert main(arguments) == 0  # a re-run skips every finished run
    assert "skipped (done)" in capsys.readouterr().out
    assert {path: path.stat().st_mtime_ns for path in output.glob("*/*/metrics.jsonl")} == mtimes

    def with_value(old: str, new: str) -> list[str]:
        return [new if argument == old else argument for argument in arguments]

    assert main(with_value("iterations=1", "iterations=2")) == 0  # more iterations: every run is resumed
    assert all(json.loads(path.read_text().splitlines()[-1])["iteration"] == 2
               for path in output.glob("*/*/metrics.jsonl"))
    capsys.readouterr()
    assert main(with_value("batch_size=2", "batch_size=3")) == 2  # a finished run's config cannot change under it
    assert "`batch_size`" in capsys.readouterr().err


def test_a_run_stopped_by_its_time_budget_counts_as_finished(tiny_model_dir, tmp_path, capsys):
    output = tmp_path / "sweep"
    arguments = ["sweep", "--output-dir", str(output), "--grid", "sigma=0.01", "--set", f"model={tiny_model_dir}",
                 "--set", "task=conciseness", "--set", "population_size=2", "--set", "iterations=50",
                 "--set", "max_training_seconds=1e-6", "--set", "batch_size=2", "--set", "max_new_tokens=3",
                 "--set", "num_eval=2", "--set", "dtype=float32", "--set", "report_to=[]",
                 "--set", f"eval_max_new_tokens={TINY_EVAL_BUDGET}"]
    assert main(arguments) == 0
    metrics = (output / "sigma=0.01" / "seed0" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(metrics[-1])["iteration"] == 1  # the budget ran out after the first iteration
    capsys.readouterr()
    assert main(arguments) == 0  # far from 50 iterations, but out of time: not resumed
    assert "skipped (done)" in capsys.readouterr().out
    assert (output / "sigma=0.01" / "seed0" / "metrics.jsonl").read_text().splitlines() == metrics


def test_heatmap_has_a_panel_per_value_of_a_third_key_and_averages_the_rest(tmp_path):
    from evotune.sweep import heatmap, panel_grids

    rows = [{"population_size": p, "singular_value_fraction": a, "adapter": r, "sigma": s,
             "final_mean": p + 10 * a + 100 * r + s} for r in (4, 8) for a in (0.5, 1.0) for p in (16, 32)
            for s in (0.0, 2.0)]
    result = {"metric": "eval/accuracy", "keys": ["population_size", "singular_value_fraction", "adapter", "sigma"],
              "seeds": [0], "rows": rows}
    xs, ys, grids = panel_grids(result)
    assert xs == ["16", "32"] and ys == ["0.5", "1.0"] and list(grids) == ["4", "8"]
    # rows are y (alpha), columns x (population); sigma 0 and 2 average to +1
    assert grids["8"].tolist() == [[16 + 5 + 800 + 1, 32 + 5 + 800 + 1], [16 + 10 + 800 + 1, 32 + 10 + 800 + 1]]
    assert heatmap(result, tmp_path / "heatmap.png").stat().st_size > 0


def test_a_sweep_says_how_many_runs_it_starts_and_a_large_one_needs_yes(tmp_path, capsys):
    """1,000 runs started with no count or time; above 100 runs (or 24 estimated hours) --yes is asked for, before
    anything is written."""
    from evotune.cli.main import main

    grid = ["--grid", "sigma=" + ",".join(str(0.001 * k) for k in range(1, 11)),
            "--grid", "learning_rate=" + ",".join(str(0.01 * k) for k in range(1, 11))]
    assert main(["sweep", *grid, "--seeds", "0", "1", "--output-dir", str(tmp_path / "big")]) == 2
    error = " ".join(capsys.readouterr().err.split())
    assert "this sweep starts 200 runs (about" in error and "pass --yes to start it" in error
    assert not (tmp_path / "big").exists()

"""`data_seed`: the data (the task's split, the prompts each iteration samples, retention splits) seeded apart
from the noise, so that two runs can differ in only one of them; unset, the data follows `seed` as before;
`evotune compare` pools such runs as seeds of one method and shows both seeds."""

from __future__ import annotations

import yaml
from helpers import tiny_config
from test_compare_grouping import es_config, write_run

from evotune.runs.compare import compare_runs
from evotune.sft import SFTConfig, sft_rows
from evotune.trainer import Trainer


def trainer(model_dir: str, tmp_path, name: str, **overrides) -> Trainer:
    config = tiny_config(model_dir, task="arithmetic", num_eval=8, batch_size=4, report_to=[],
                         retention_tasks=["countdown"], retention_num_eval=3, **overrides)
    return Trainer(config, tmp_path / name)


def data_of(run: Trainer) -> tuple:
    """Everything the data seed decides: held-out and retention rows, the first iterations' prompts."""
    return (run.task.eval_rows, run.retention.tasks[0].eval_rows, [run.batch_indices(i) for i in range(3)])


def noise_of(run: Trainer) -> list:
    """The candidates' noise seeds of iteration 0 (what `seed` decides)."""
    return [candidate.seed for candidate in run.strategy.ask()]


def test_unset_data_seed_is_the_seed_and_each_seed_changes_only_its_own_part(tiny_model_dir, tmp_path):
    default = trainer(tiny_model_dir, tmp_path, "default", seed=1)
    same = trainer(tiny_model_dir, tmp_path, "same", seed=1, data_seed=1)
    assert data_of(default) == data_of(same) and noise_of(default) == noise_of(same)

    other_noise = trainer(tiny_model_dir, tmp_path, "noise", seed=2, data_seed=1)
    assert data_of(other_noise) == data_of(default)
    assert noise_of(other_noise) != noise_of(default)

    other_data = trainer(tiny_model_dir, tmp_path, "data", seed=1, data_seed=2)
    assert noise_of(other_data) == noise_of(default)
    for mine, theirs in zip(data_of(other_data), data_of(default)):
        assert mine != theirs


def test_the_run_records_its_data_seed_in_config_and_model_card(tiny_model_dir, tmp_path):
    trainer(tiny_model_dir, tmp_path, "run", seed=0, data_seed=7, iterations=1).train()
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["data_seed"] == 7
    assert "| `data_seed` | 7 |" in (tmp_path / "run" / "final" / "README.md").read_text()


def test_sft_splits_its_task_by_the_data_seed():
    rows = {name: sft_rows(SFTConfig(task="arithmetic", **seeds))[1].eval_rows
            for name, seeds in (("default", {"seed": 3}), ("data", {"seed": 0, "data_seed": 3}),
                                ("other", {"seed": 3, "data_seed": 4}))}
    assert rows["default"] == rows["data"] != rows["other"]


def test_compare_pools_data_seeds_as_seeds_of_one_method_and_names_both(tmp_path):
    runs = [write_run(tmp_path / "a", es_config(seed=0), [0.1, 0.2]),
            write_run(tmp_path / "b", es_config(seed=0, data_seed=1), [0.1, 0.4])]
    result = compare_runs(runs, tmp_path / "out")
    (row,) = result["methods"]
    assert row["runs"] == 2 and row["seeds"] == [0, "0 (data_seed 1)"]
    assert not any("share a seed" in note for note in result["notes"])

"""bench/quickstart/measure.py reads either command's run directory: `evotune train`'s and `evotune grpo`'s."""

from __future__ import annotations

import yaml

from bench.quickstart.measure import RECORDED, by_settings, run_config
from evotune.config.grpo import GRPO_QUICKSTART, GRPORunConfig
from evotune.config.train import QUICKSTART, TrainConfig


def write_run(directory, config) -> str:
    directory.mkdir()
    (directory / "config.yaml").write_text(yaml.safe_dump(config.to_dict()))
    return str(directory)


def test_each_commands_run_is_read_with_its_own_config(tmp_path):
    train, command = run_config(write_run(tmp_path / "train", TrainConfig.from_dict(QUICKSTART)))
    assert command == "train" and isinstance(train, TrainConfig)
    assert train.sigma == TrainConfig.from_dict(QUICKSTART).sigma == 2e-3  # lowrank-es's own
    grpo, command = run_config(write_run(tmp_path / "grpo", GRPORunConfig.from_dict(GRPO_QUICKSTART)))
    assert command == "grpo" and isinstance(grpo, GRPORunConfig)
    assert grpo.learning_rate == 1e-3 and grpo.temperature == 0.7  # grpo-lora's own defaults
    for config, name in ((train, "train"), (grpo, "grpo")):  # every recorded setting is a key of its command
        assert all(hasattr(config, key) for key in RECORDED[name])


def test_runs_of_two_settings_are_summarized_apart_with_their_times_and_probes():
    full, lowrank = {"space": "full", "iterations": 10}, {"space": "lowrank", "iterations": 20}
    runs = [{"settings": full, "seed": 0, "gain_points": 14.0, "wall_time_s": 600.0, "speed_probe": {"probe_s": 5.6}},
            {"settings": lowrank, "seed": 0, "gain_points": 10.0, "wall_time_s": 590.0,
             "speed_probe": {"probe_s": 5.5}},
            {"settings": lowrank, "seed": 1, "gain_points": 12.0, "wall_time_s": 610.0, "speed_probe": None}]
    first, second = by_settings(runs)
    assert first["settings"] == full and first["gain_over_seeds"] is None and first["probe_s"] == [5.6]
    assert second["settings"] == lowrank and second["seeds"] == [0, 1] and second["gain_points"] == [10.0, 12.0]
    assert second["gain_over_seeds"]["mean"] == 11.0 and second["wall_time_s"] == [590.0, 610.0]
    assert second["probe_s"] == [5.5]  # a run without a recorded probe adds none


def test_the_transfer_split_is_pooled_over_its_groups_and_read_per_group_at_its_budget():
    import numpy as np

    from bench.quickstart.measure import pooled, transfer_summary
    from evotune.tasks.phrasings import TRANSFER_BUDGETS, TRANSFER_MAX_NEW_TOKENS

    scores = {"other wordings": {budget: np.array([1.0, 0.0, 0.0, 0.0]) for budget in TRANSFER_BUDGETS},
              "subtraction": {budget: np.array([1.0, 1.0]) for budget in TRANSFER_BUDGETS}}
    scores["other wordings"][TRANSFER_MAX_NEW_TOKENS] = np.array([1.0, 1.0, 0.0, 0.0])  # a longer answer read whole
    summary = transfer_summary(scores)
    assert summary["by_group"] == {"other wordings": 0.5, "subtraction": 1.0}
    assert summary["accuracy"][TRANSFER_MAX_NEW_TOKENS] == round(4 / 6, 4)
    assert summary["accuracy"][min(TRANSFER_BUDGETS)] == 0.5
    assert pooled(scores).tolist() == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0]

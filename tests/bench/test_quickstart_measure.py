"""bench/quickstart/measure.py reads either command's run directory: `evotune train`'s and `evotune grpo`'s."""

from __future__ import annotations

import yaml

from bench.quickstart.measure import RECORDED, run_config
from evotune.config.grpo import GRPO_QUICKSTART, GRPORunConfig
from evotune.config.train import QUICKSTART, TrainConfig


def write_run(directory, config) -> str:
    directory.mkdir()
    (directory / "config.yaml").write_text(yaml.safe_dump(config.to_dict()))
    return str(directory)


def test_each_commands_run_is_read_with_its_own_config(tmp_path):
    train, command = run_config(write_run(tmp_path / "train", TrainConfig.from_dict(QUICKSTART)))
    assert command == "train" and isinstance(train, TrainConfig) and train.sigma == QUICKSTART["sigma"]
    grpo, command = run_config(write_run(tmp_path / "grpo", GRPORunConfig.from_dict(GRPO_QUICKSTART)))
    assert command == "grpo" and isinstance(grpo, GRPORunConfig)
    assert grpo.learning_rate == GRPO_QUICKSTART["learning_rate"] and grpo.temperature == 0.7
    for config, name in ((train, "train"), (grpo, "grpo")):  # every recorded setting is a key of its command
        assert all(hasattr(config, key) for key in RECORDED[name])

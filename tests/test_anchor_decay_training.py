"""anchor_decay in training: an interrupted and resumed run ends on the uninterrupted run's weights (the base is
the loaded model, snapshotted before the checkpoint's mean loads), and Ray replicas replay the same decay."""

from __future__ import annotations

import pytest
import torch
from helpers import assert_same, first_in_ci, requires_ray, state, tiny_config, train_until_killed

from evotune.trainer import Trainer

SPACES = {"full": {"dtype": "bfloat16"}, "lowrank": {}, "lora": {"space": "lora", "lora_init": "gaussian"},
          "svd_lora": {"space": "svd_lora", "strategy": "openes", "lora_init": "gaussian", "lora_rank": 4}}


def config(model_dir: str, space: str, **overrides):
    options = {"space": space, **SPACES[space], "anchor_decay": 4.0, "report_to": [], **overrides}
    return tiny_config(model_dir, **options)  # learning_rate 0.05: a fifth of the way back per step


@pytest.mark.parametrize("space", first_in_ci(SPACES))
def test_resumed_run_ends_on_the_uninterrupted_weights(tiny_model_dir, tmp_path, monkeypatch, space):
    uninterrupted = Trainer(config(tiny_model_dir, space), tmp_path / "a")
    uninterrupted.train()
    killed = Trainer(config(tiny_model_dir, space), tmp_path / "b")
    train_until_killed(monkeypatch, killed, 4)  # during iteration 4, after the checkpoint at iteration 2
    resumed = Trainer(config(tiny_model_dir, space), tmp_path / "b", resume=True)
    assert resumed.strategy.iteration == 2
    resumed.train()
    assert_same(state(resumed), state(uninterrupted))
    assert resumed.space.checksum() == uninterrupted.space.checksum()
    # the decay did something: the same run without it ends elsewhere
    free = Trainer(config(tiny_model_dir, space, anchor_decay=0.0), tmp_path / "c")
    free.train()
    assert any(not torch.equal(tensor, state(free)[name]) for name, tensor in state(resumed).items())


@requires_ray
@pytest.mark.usefixtures("ray_instance")
@pytest.mark.slow  # Ray replicas' replay of an update is tested in CI by distributed/test_ray.py
def test_ray_replicas_replay_the_decay(tiny_model_dir, tmp_path):
    """Two actors apply every update with the driver's decay: their means equal the driver's bit for bit
    (check_replicas), and the pooled run equals the single-process one."""
    options = dict(population_size=6, batch_size=3, max_new_tokens=5, num_eval=3, eval_every=0, checkpoint_every=1)
    local = Trainer(config(tiny_model_dir, "full", **options), tmp_path / "local")
    for _ in range(2):
        local.step()
    pooled = Trainer(config(tiny_model_dir, "full", distributed="ray", workers=2, checksum_every=1, **options),
                     tmp_path / "ray")
    for _ in range(2):
        pooled.step()
    assert_same(state(local), state(pooled))
    pooled.evaluator.check_replicas()  # every actor holds the driver's mean, bit for bit
    pooled.evaluator.close()

"""bench/curves: a run's model at a CPU-second mark is the one whose training had used no more than the mark, and an
ES arm's is replayed exactly from the run's update log (no weights are kept between marks)."""

from __future__ import annotations

import torch
from helpers import tiny_config

from bench.curves.score import es_models, step_at
from evotune.trainer import Trainer


def test_the_step_at_a_mark_is_the_last_that_ended_within_it():
    steps = [{"iteration": 1, "cpu_s": 40.0}, {"iteration": 2, "cpu_s": 80.5}, {"iteration": 3, "cpu_s": 121.0}]
    assert [step_at(steps, mark) for mark in (0.0, 39.9, 40.0, 100.0, 121.0, 1e9)] == [0, 0, 1, 2, 3, 3]


def test_an_es_runs_mean_at_each_mark_is_replayed_exactly_from_its_update_log(tiny_model_dir, tmp_path):
    """The mean replayed to iteration k equals the final mean of the same run stopped after k iterations, bit for
    bit, for every k: the curves' ES models need no snapshot of the weights."""
    values = dict(space="lowrank", perturbation_rank=1, report_to=[], eval_every=0, checkpoint_every=100,
                  training_clock="cpu")
    Trainer(tiny_config(tiny_model_dir, iterations=3, **values), tmp_path / "whole").train()
    replayed = es_models(tmp_path / "whole", [0, 1, 3])
    base = {name: tensor.clone() for name, tensor in next(replayed).model.state_dict().items()}
    for steps in (1, 3):
        stopped = Trainer(tiny_config(tiny_model_dir, iterations=steps, **values), tmp_path / f"stopped{steps}")
        stopped.train()
        backend = next(replayed)
        expected = stopped.space.state_tensors()
        model = dict(backend.model.named_parameters())
        assert all(torch.equal(model[name].detach().float(), tensor) for name, tensor in expected.items())
        assert any(not torch.equal(model[name].detach(), base[name]) for name in expected)  # it moved

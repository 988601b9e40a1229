"""The optimizers as chains of transforms: the same numbers as the update rules they replaced (written out here
as the formulas the earlier SGD and Adam classes computed), composable, describable across processes, and
round-trippable (save -> step -> load)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from evotune.optimizers import (
    SGD,
    Adam,
    AnchorDecay,
    Chain,
    DecoupledWeightDecay,
    ScaleByAdam,
    ScaleByLearningRate,
    make_optimizer,
)
from evotune.spaces import VectorSpace


def earlier_sgd(gradient, mean, learning_rate, weight_decay):
    gradient = gradient.clone()
    gradient *= learning_rate
    if weight_decay:
        gradient -= mean * (learning_rate * weight_decay)
    return gradient


class EarlierAdam:
    def __init__(self, learning_rate, weight_decay, beta1=0.9, beta2=0.999, epsilon=1e-8):
        self.lr, self.wd, self.b1, self.b2, self.eps = learning_rate, weight_decay, beta1, beta2, epsilon
        self.m, self.v, self.t = {}, {}, 0

    def step(self, name, gradient, mean):
        if name not in self.m:
            self.m[name], self.v[name] = gradient * 0.0, gradient * 0.0
        m = self.m[name] = self.m[name] * self.b1 + gradient * (1 - self.b1)
        v = self.v[name] = self.v[name] * self.b2 + gradient * gradient * (1 - self.b2)
        delta = (m / (1 - self.b1**self.t)) / ((v / (1 - self.b2**self.t)) ** 0.5 + self.eps) * self.lr
        return delta - mean * (self.lr * self.wd) if self.wd else delta


def gradients(steps: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [{"a": torch.randn(7, generator=generator), "b": torch.randn(3, 2, generator=generator)}
            for _ in range(steps)]


@pytest.mark.parametrize("weight_decay", [0.0, 0.05])
def test_sgd_chain_is_bit_for_bit_the_earlier_rule(weight_decay):
    chain = SGD(0.3, weight_decay=weight_decay)
    means = {"a": torch.ones(7), "b": torch.full((3, 2), -2.0)}
    for step in gradients(4):
        chain.begin_step()
        for name, gradient in step.items():
            expected = earlier_sgd(gradient, means[name], 0.3, weight_decay)
            assert torch.equal(chain.step(name, gradient.clone(), means[name]), expected)
            means[name] = means[name] + expected


@pytest.mark.parametrize("weight_decay", [0.0, 0.05])
def test_adam_chain_is_bit_for_bit_the_earlier_rule(weight_decay):
    chain, earlier = Adam(0.01, weight_decay=weight_decay), EarlierAdam(0.01, weight_decay)
    means = {"a": torch.ones(7), "b": torch.full((3, 2), -2.0)}
    for step in gradients(5):
        chain.begin_step()
        earlier.t += 1
        for name, gradient in step.items():
            expected = earlier.step(name, gradient.clone(), means[name])
            assert torch.equal(chain.step(name, gradient.clone(), means[name]), expected)
            means[name] = means[name] + expected
    assert chain.step_count == 5 and set(chain.first_moment) == {"a", "b"}


def test_the_stages_the_optimizer_key_names():
    assert [type(t) for t in Adam(0.1, weight_decay=0.1, anchor_decay=2.0).transforms] == [
        ScaleByAdam, ScaleByLearningRate, DecoupledWeightDecay, AnchorDecay]
    assert [type(t) for t in SGD(0.1).transforms] == [ScaleByLearningRate]  # no decay stage when decay is 0
    assert SGD(0.1, anchor_decay=2.0).anchor_fraction() == pytest.approx(0.2)
    assert SGD(0.1).anchor_fraction() == 0.0


def test_a_chain_of_ones_own_steps_a_space():
    """Any chain moves a space's mean, not only the two the config names: here Adam with its own beta1 and no
    decay stage."""
    chain = Chain(ScaleByAdam(beta1=0.5), ScaleByLearningRate(0.1))
    space = VectorSpace(np.zeros(4), optimizer=chain)
    space.step([1, 2], [1.0, -1.0])
    moved = space.state_tensors()["vector"]
    assert torch.all(moved.abs() > 0.09) and torch.all(moved.abs() <= 0.1 + 1e-6)  # Adam's first step: ~lr * sign


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_a_description_rebuilds_the_same_optimizer_in_another_process(name):
    """What the vLLM worker receives: plain values (JSON/msgpack-safe) that rebuild a chain stepping identically."""
    original = make_optimizer(name, 0.02, weight_decay=0.1, anchor_decay=3.0)
    description = json.loads(json.dumps(original.describe()))
    rebuilt = Chain.from_description(description)
    assert rebuilt.describe() == original.describe()
    assert rebuilt.anchor_fraction() == original.anchor_fraction()
    mean = torch.linspace(-1, 1, 6)
    for step in gradients(3):
        original.begin_step()
        rebuilt.begin_step()
        gradient = step["a"][:6]
        assert torch.equal(original.step("a", gradient.clone(), mean), rebuilt.step("a", gradient.clone(), mean))


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_save_step_load_continues_bit_for_bit(name):
    """The chain's one state (the step counter as JSON, the moments as named tensors) saved after two steps and
    loaded into a fresh chain continues exactly as the uninterrupted one."""
    steps = gradients(5, seed=3)
    mean = torch.zeros(7)
    uninterrupted, resumed = make_optimizer(name, 0.05, 0.01), make_optimizer(name, 0.05, 0.01)
    for step in steps[:2]:
        uninterrupted.begin_step()
        uninterrupted.step("a", step["a"].clone(), mean)
    state = json.loads(json.dumps(uninterrupted.state_dict()))
    tensors = {key: value.clone() for key, value in uninterrupted.tensors().items()}
    resumed.load_state_dict(state, tensors)
    assert resumed.step_count == 2
    for step in steps[2:]:
        uninterrupted.begin_step()
        resumed.begin_step()
        assert torch.equal(uninterrupted.step("a", step["a"].clone(), mean), resumed.step("a", step["a"].clone(), mean))

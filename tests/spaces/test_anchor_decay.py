"""Anchored weight decay (AWD, Schweighofer et al., arXiv 2605.30148): after each step the mean moves the
fraction learning_rate * anchor_decay of the way back to where the space started, on every space."""

from __future__ import annotations

import math

import pytest
import torch

from evotune.config import TrainConfig
from evotune.errors import ConfigError
from evotune.optimizers import SGD, Adam, make_optimizer
from evotune.spaces import FullParameterSpace, noise
from evotune.types import SeedUpdate

UPDATES = [SeedUpdate(0, [3, 4], [1.0, -0.5]), SeedUpdate(1, [5], [2.0])]


def float64(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().to(torch.float64).clone() for name, tensor in tensors.items()}


def test_full_space_mean_by_hand(model_source):
    """Two updates on the bf16 tiny Llama: mean <- m + lr * sum_k c_k eps_k, then m + f (base - m), f = lr * a,
    computed here in float64 from noise() itself; the live weights are that mean cast to bfloat16."""
    learning_rate, anchor_decay = 0.01, 5.0
    fraction = learning_rate * anchor_decay
    model = model_source.base("bfloat16")
    space = FullParameterSpace(model, optimizer=SGD(learning_rate, anchor_decay=anchor_decay))
    base = float64(space.master)
    expected = float64(space.master)
    for update in UPDATES:
        space.apply_update(update)
        for name, mean in expected.items():
            for seed, coefficient in zip(update.seeds, update.coefficients):
                mean += learning_rate * coefficient * noise(mean.shape, seed, name).to(torch.float64)
            mean += fraction * (base[name] - mean)
    for name, param in model.named_parameters():
        torch.testing.assert_close(space.master[name].to(torch.float64), expected[name], rtol=0, atol=1e-6)
        assert torch.equal(param, space.master[name].to(torch.bfloat16)), name
    # and the pull is real: without it the mean is elsewhere by far more than the tolerance
    free = FullParameterSpace(model_source.base("bfloat16"), optimizer=SGD(learning_rate))
    for update in UPDATES:
        free.apply_update(update)
    name = space.parameters[1][0]
    assert (free.master[name] - space.master[name]).abs().max() > 1e-3


def test_every_space_moves_back_by_the_fraction(space_case):
    """Against the same space without the decay (whose SGD step does not depend on the mean): after each
    update the anchored mean is (mean + step) + f * (start - (mean + step)); a zero update only decays."""
    learning_rate, anchor_decay = 0.05, 4.0
    fraction = learning_rate * anchor_decay
    anchored = space_case.build(SGD(learning_rate, anchor_decay=anchor_decay))
    free = space_case.build(SGD(learning_rate))
    start = float64(anchored.mean())
    expected = float64(anchored.mean())
    for update in UPDATES:
        before = float64(free.mean())
        free.space.apply_update(update)
        anchored.space.apply_update(update)
        for name, mean in expected.items():
            mean += float64(free.mean())[name] - before[name]  # this update's step
            mean += fraction * (start[name] - mean)
    for name, tensor in anchored.mean().items():
        torch.testing.assert_close(tensor.to(torch.float64), expected[name], rtol=1e-6, atol=1e-6)
    distance = {name: expected[name] - start[name] for name in expected}
    assert max(float(d.abs().max()) for d in distance.values()) > 1e-2  # the test moved the mean
    anchored.space.apply_update(SeedUpdate(2, [6], [0.0]))  # no step: the distance shrinks by 1 - f
    for name, tensor in anchored.mean().items():
        torch.testing.assert_close(tensor.to(torch.float64) - start[name], (1 - fraction) * distance[name],
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_anchor_decay_zero_is_bit_identical_to_none(space_case, optimizer):
    """anchor_decay 0 (and a kept base) changes no bit of the mean or of the live weights."""
    kinds = {"sgd": SGD, "adam": Adam}
    plain = space_case.build(kinds[optimizer](0.05))
    zero = space_case.build(make_optimizer(optimizer, 0.05, anchor_decay=0.0))
    subjects = [plain, zero]
    if isinstance(plain.space, FullParameterSpace):  # full, lowrank: the drift base kept, never used to step
        kept = space_case.build(None)
        kept.space = type(kept.space)(kept.model, optimizer=kinds[optimizer](0.05), keep_base=True,
                                      **space_case.case.options)
        subjects.append(kept)
    for update in UPDATES:
        for subject in subjects:
            subject.space.apply_update(update)
    for subject in subjects[1:]:
        assert subject.space.checksum() == plain.space.checksum()
        assert subject.live_digest() == plain.live_digest()


def test_a_space_built_without_its_base_refuses_to_anchor(model_source):
    space = FullParameterSpace(model_source.base("bfloat16"), optimizer=SGD(0.05))
    space.optimizer = SGD(0.05, anchor_decay=1.0)
    with pytest.raises(ConfigError, match="without its base weights"):
        space.apply_update(UPDATES[0])


def test_the_base_costs_the_models_dtype_not_fp32(model_source):
    """The base is kept in the weights' own dtype (exact: the fp32 master starts as its upcast)."""
    space = FullParameterSpace(model_source.base("bfloat16"), optimizer=SGD(0.05, anchor_decay=1.0))
    assert all(tensor.dtype == torch.bfloat16 and tensor.device.type == "cpu" for tensor in space.base.values())
    assert all(torch.equal(space.base[name].float(), space.master[name]) for name in space.master)
    assert FullParameterSpace(model_source.base("bfloat16"), optimizer=SGD(0.05)).base is None  # off: no copy


@pytest.mark.parametrize("values, message", [
    ({"anchor_decay": -1.0}, "must be a finite number >= 0"),
    ({"anchor_decay": math.nan}, "must be a finite number"),
    ({"anchor_decay": 3000.0, "learning_rate": 5e-4}, "at most 2000"),
    ({"anchor_decay": 1.0, "strategy": "cma", "space": "svd_lora"}, "CMA-ES owns its mean"),
])
def test_config_errors_name_the_key_and_the_fix(values, message):
    with pytest.raises(ConfigError, match=message) as error:
        TrainConfig(**values)
    assert "`anchor_decay`" in str(error.value)


def test_make_optimizer_guards_api_users():
    assert make_optimizer("sgd", 0.01, anchor_decay=10.0).anchor_fraction() == pytest.approx(0.1)
    with pytest.raises(ValueError, match="anchor_decay"):
        make_optimizer("adam", 0.5, anchor_decay=3.0)

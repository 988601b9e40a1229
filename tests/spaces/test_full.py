"""evotune.spaces.full: what FullParameterSpace adds to the contract (test_contract.py): chunked noise,
regex selection, fp32 accumulation, no mean vector."""

from __future__ import annotations

import sys

import pytest
import torch

from evotune.errors import ConfigError
from evotune.optimizers import SGD
from evotune.spaces import FullParameterSpace, noise
from evotune.types import Candidate, MeanUpdate, SeedUpdate


@pytest.fixture
def model(model_source):
    """The tiny Llama in bf16, a fresh copy per test."""
    return model_source.base("bfloat16")


def snapshot(model) -> dict[str, torch.Tensor]:
    return {name: param.detach().clone() for name, param in model.named_parameters()}


def assert_unchanged(model, reference):
    for name, param in model.named_parameters():
        assert torch.equal(param.view(torch.uint8), reference[name].view(torch.uint8)), name


def test_update_accumulates_in_fp32(model):
    """A 1e-6 step vanishes in bf16 but must survive in the fp32 mean and add up over steps."""
    space = FullParameterSpace(model)
    name = space.parameters[1][0]
    start = space.master[name].clone()
    for _ in range(3):
        space.optimizer = SGD(learning_rate=1e-6)
        space.apply_update(SeedUpdate(0, [7], [1.0]))
    expected = start + 3 * 1e-6 * noise(start.shape, 7, name)
    assert torch.allclose(space.master[name], expected, atol=1e-7)
    assert not torch.equal(space.master[name], start)


def test_selection_by_regex_leaves_others_untouched(model):
    before = snapshot(model)
    space = FullParameterSpace(model, include=[r"self_attn"], exclude=[r"layers\.1\."])
    assert space.parameters and all("layers.0.self_attn" in name for name, _ in space.parameters)
    space.optimizer = SGD(learning_rate=0.1)
    space.apply_update(SeedUpdate(0, [1], [1.0]))
    for name, param in model.named_parameters():
        changed = not torch.equal(param, before[name])
        assert changed == ("layers.0.self_attn" in name), name


def test_a_selection_of_nothing_is_a_config_error(model):
    with pytest.raises(ConfigError, match="selects no parameter"):
        FullParameterSpace(model, include=[r"no_such_parameter"])


def test_chunked_noise_matches_the_whole_tensor_definition(model, monkeypatch):
    """Tensors larger than a chunk are perturbed piece by piece with the same values noise() defines."""
    monkeypatch.setattr(sys.modules["evotune.spaces.noise"], "CHUNK_SIZE", 64)  # the package's `noise` is the function
    monkeypatch.setattr(sys.modules["evotune.spaces.full"], "CHUNK_SIZE", 64)
    before = snapshot(model)
    space = FullParameterSpace(model)
    space.apply(Candidate(seed=9, scale=0.1))
    for name, param in model.named_parameters():
        expected = (space.master[name] + 0.1 * noise(param.shape, 9, name)).to(param.dtype)
        assert torch.equal(param, expected), name
    space.restore()
    assert_unchanged(model, before)


def test_cma_mean_update_is_refused_with_the_fix(model):
    """No small mean vector: CMA-ES's MeanUpdate is a ConfigError naming `strategy: openes` and vector spaces."""
    with pytest.raises(ConfigError, match="strategy: cma"):
        FullParameterSpace(model).apply_update(MeanUpdate(0, [0.0, 1.0]))

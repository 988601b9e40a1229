"""evotune.spaces.svd_lora (ESSA): what SVDLoRASpace adds to the contract (test_contract.py): offsets to
the top singular values, alpha's rounding and errors, the zero offset is the adapter, zero-B adapters."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evotune.errors import ConfigError
from evotune.spaces import SVDLoRASpace, noise
from evotune.types import Candidate

RANK = 8
NUM_MODULES = 8  # 2 layers x q, k, v, o
INPUT_IDS = torch.tensor([[1, 17, 230, 4051, 99, 12]])


@torch.no_grad()
def logits(model) -> torch.Tensor:
    return model(input_ids=INPUT_IDS).logits  # (1, seq, vocab)


@pytest.fixture
def model(model_source):
    """The tiny Llama (fp32) with a rank-8 adapter whose B is random."""
    return model_source.lora()


def test_noise_moves_the_top_singular_values(model):
    space = SVDLoRASpace(model, alpha=0.5)
    space.apply(Candidate(seed=5, scale=0.1))
    for factor, svd in zip(space.factors, space.svds):
        eps = noise((4,), 5, f"svd/{factor.module}/{factor.factor}").double()
        expected = svd.u @ torch.diag(svd.s + torch.cat([0.1 * eps, torch.zeros(4, dtype=torch.float64)])) @ svd.vh
        assert torch.allclose(factor.weight.double(), expected, atol=1e-6)


def test_dimension_is_two_k_per_module(model):
    assert SVDLoRASpace(model, alpha=1.0).dimension == NUM_MODULES * RANK * 2
    half = SVDLoRASpace(model, alpha=0.5)
    assert half.k == 4 and half.dimension == NUM_MODULES * 4 * 2


def test_alpha_rounding_and_validation(model):
    assert SVDLoRASpace(model, alpha=0.125).k == 1  # the smallest alpha that works at r = 8
    assert SVDLoRASpace(model, alpha=0.3).k == 2  # floor(2.4)
    with pytest.raises(ConfigError, match=r"alpha=0\.1 .*rank 8.*0\.125"):
        SVDLoRASpace(model, alpha=0.1)
    for alpha in (0.0, -0.5, 1.5):
        with pytest.raises(ConfigError, match=r"\(0, 1\]"):
            SVDLoRASpace(model, alpha=alpha)


@pytest.mark.parametrize("alpha, offsets", [(1.0, "absolute"), (0.5, "absolute"), (1.0, "relative"),
                                            (0.5, "relative")])
def test_zero_offset_reproduces_the_adapter(model, alpha, offsets):
    original = {name: param.detach().clone() for name, param in model.named_parameters()}
    original_logits = logits(model)
    space = SVDLoRASpace(model, alpha=alpha, offsets=offsets)
    for name, param in model.named_parameters():
        if "lora_" in name:
            relative = (param - original[name]).norm() / original[name].norm()
            assert relative <= 1e-6, (name, float(relative))
            assert torch.allclose(param, original[name], rtol=1e-6, atol=1e-7), name
    assert torch.allclose(logits(model), original_logits, rtol=0, atol=1e-5)
    assert np.array_equal(space.mean_vector(), np.zeros(space.dimension))


def test_zero_b_offsets_still_move_the_model(model_source):
    model = model_source.lora(random_b=False)
    with model.disable_adapter():
        base_logits = logits(model)
    assert torch.equal(logits(model), base_logits)  # B = 0: the adapter is a no-op
    space = SVDLoRASpace(model)
    assert space.dimension == NUM_MODULES * RANK * 2
    assert all(not svd.s.any() for f, svd in zip(space.factors, space.svds) if f.factor == "B")
    space.apply(Candidate(seed=1, scale=0.5))
    assert any(f.weight.any() for f in space.factors if f.factor == "B")
    assert not torch.allclose(logits(model), base_logits, atol=1e-4)
    space.restore()
    assert all(not f.weight.any() for f in space.factors if f.factor == "B")
    assert torch.equal(logits(model), base_logits)


def test_a_checkpoint_basis_of_another_shape_is_refused_before_anything_changes(model):
    space = SVDLoRASpace(model, alpha=0.5)
    state = {key: value.clone() for key, value in space.state_tensors().items()}
    state["vector"] += 0.1
    key = next(key for key in state if key.startswith("basis/"))
    state[key] = torch.zeros(1, 1, dtype=torch.float64)
    with pytest.raises(ConfigError, match="shape"):
        space.load_state_tensors(state)
    assert not space.mean.any()  # neither the offsets nor the bases moved


def test_relative_offsets_scale_every_singular_value_by_the_same_fraction(model):
    """With every singular value searched, offsets x = c everywhere make each factor exactly (1 + c) times
    itself, whatever its scale; so sigma is a fraction of each factor's size, not an absolute step."""
    original = {f"{f.module}.{f.factor}": f.weight.detach().double().clone() for f in SVDLoRASpace(model).factors}
    space = SVDLoRASpace(model, alpha=1.0, offsets="relative")
    space.set_mean(np.full(space.dimension, 0.25))
    for factor in space.factors:
        expected = 1.25 * original[f"{factor.module}.{factor.factor}"]
        assert torch.allclose(factor.weight.double(), expected, rtol=1e-5, atol=1e-7), factor.module
    absolute = SVDLoRASpace(model, alpha=1.0, offsets="absolute")  # the same x as an absolute step: not a scaling
    absolute.set_mean(np.full(absolute.dimension, 0.25))
    factor = absolute.factors[0]
    assert not torch.allclose(factor.weight.double(), 1.25 * original[f"{factor.module}.{factor.factor}"], atol=1e-3)


def test_relative_offsets_on_a_zero_b_adapter_are_refused_with_the_fix(model_source):
    with pytest.raises(ConfigError, match="svd_offsets: absolute"):
        SVDLoRASpace(model_source.lora(random_b=False), offsets="relative")
    with pytest.raises(ConfigError, match="svd_offsets"):
        SVDLoRASpace(model_source.lora(), offsets="proportional")

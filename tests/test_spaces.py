"""Space contracts: noise determinism, exact restore, no-op settings, fp32 accumulation, replay."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest
import torch

from evotune.spaces import FullParameterSpace, noise
from evotune.strategies import SGD, Candidate, SeedUpdate


def digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def snapshot(model) -> dict[str, torch.Tensor]:
    return {name: param.detach().clone() for name, param in model.named_parameters()}


def assert_bit_identical(model, reference):
    for name, param in model.named_parameters():
        assert torch.equal(param.view(torch.uint8) if param.dtype == torch.bfloat16 else param, reference[name].view(
            torch.uint8) if param.dtype == torch.bfloat16 else reference[name]), name


@pytest.mark.parametrize("kind", ["gaussian", "rademacher"])
def test_noise_is_the_same_in_another_process(kind):
    code = ("import hashlib, torch; from evotune.spaces import noise; "
            f"t = noise((7, 33), 123456789, 'layers.0.weight', {kind!r}); "
            "print(hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest())")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert other == digest(noise((7, 33), 123456789, "layers.0.weight", kind))


@pytest.mark.parametrize("kind", ["gaussian", "rademacher"])
def test_noise_is_independent_across_tensors_and_seeds(kind):
    a = noise((64, 64), 1, "layers.0.q_proj.weight", kind)
    b = noise((64, 64), 1, "layers.1.q_proj.weight", kind)  # same shape, other tensor
    c = noise((64, 64), 2, "layers.0.q_proj.weight", kind)  # same tensor, other member
    assert not torch.equal(a, b) and not torch.equal(a, c)
    assert abs(float((a * b).mean())) < 0.05  # uncorrelated
    assert abs(float(a.std()) - 1.0) < 0.05 and abs(float(a.mean())) < 0.05
    if kind == "rademacher":
        assert set(a.unique().tolist()) == {-1.0, 1.0}


def test_exact_restore_after_100_cycles(tiny_backend):
    model = tiny_backend.model
    before = snapshot(model)
    space = FullParameterSpace(model)
    for member in range(100):
        space.apply(Candidate(seed=member, scale=(-1) ** member * 0.05))
        if member % 10 == 0:
            space.restore()
    space.restore()
    assert_bit_identical(model, before)


def test_apply_changes_every_selected_tensor(tiny_backend):
    model = tiny_backend.model
    before = snapshot(model)
    space = FullParameterSpace(model)
    space.apply(Candidate(seed=1, scale=0.05))
    for name, param in model.named_parameters():
        assert not torch.equal(param, before[name]), name


def test_sigma_zero_apply_is_a_no_op(tiny_backend):
    model = tiny_backend.model
    before = snapshot(model)
    FullParameterSpace(model).apply(Candidate(seed=3, scale=0.0))
    assert_bit_identical(model, before)


def test_learning_rate_zero_update_is_a_no_op(tiny_backend):
    model = tiny_backend.model
    before = snapshot(model)
    space = FullParameterSpace(model)
    space.optimizer = SGD(learning_rate=0.0)
    space.apply_update(SeedUpdate(0, [1, 2, 3], [0.5, -0.2, 0.1]))
    assert_bit_identical(model, before)


def test_update_accumulates_in_fp32(tiny_backend):
    """A 1e-6 step vanishes in bf16 but must survive in the fp32 mean and add up over steps."""
    model = tiny_backend.model
    space = FullParameterSpace(model)
    name = space.parameters[1][0]
    start = space.master[name].clone()
    for _ in range(3):
        space.optimizer = SGD(learning_rate=1e-6)
        space.apply_update(SeedUpdate(0, [7], [1.0]))
    expected = start + 3 * 1e-6 * noise(start.shape, 7, name)
    assert torch.allclose(space.master[name], expected, atol=1e-7)
    assert not torch.equal(space.master[name], start)


def test_selection_by_regex_leaves_others_untouched(tiny_backend):
    model = tiny_backend.model
    before = snapshot(model)
    space = FullParameterSpace(model, include=[r"self_attn"], exclude=[r"layers\.1\."])
    assert space.parameters and all("layers.0.self_attn" in name for name, _ in space.parameters)
    space.optimizer = SGD(learning_rate=0.1)
    space.apply_update(SeedUpdate(0, [1], [1.0]))
    for name, param in model.named_parameters():
        changed = not torch.equal(param, before[name])
        assert changed == ("layers.0.self_attn" in name), name


def test_replay_of_update_log_rebuilds_the_mean(tiny_backend):
    model = tiny_backend.model
    space = FullParameterSpace(model)
    base = {k: v.clone() for k, v in space.master.items()}
    log = [{"iteration": 0, "seeds": [11, 12], "coefficients": [0.3, -0.1]},
           {"iteration": 1, "seeds": [13], "coefficients": [0.2]}]
    space.optimizer = SGD(learning_rate=0.01)
    space.replay(log)
    trained = {k: v.clone() for k, v in space.master.items()}
    space.load_state_tensors(base)
    space.replay(log)
    assert all(torch.equal(trained[k], space.master[k]) for k in trained)


def test_chunked_noise_matches_the_whole_tensor_definition(tiny_backend, monkeypatch):
    """Tensors larger than a chunk are perturbed piece by piece with the same values noise() defines."""
    full_module = sys.modules["evotune.spaces.full"]
    noise_module = sys.modules["evotune.spaces.noise"]  # the package's `noise` name is the function

    monkeypatch.setattr(noise_module, "CHUNK_SIZE", 64)
    monkeypatch.setattr(full_module, "CHUNK_SIZE", 64)
    first = noise((10, 20), 5, "w")
    assert torch.equal(first.view(-1)[:64], noise((64,), 5, "w"))  # chunk 0 is the one-chunk definition
    assert not torch.equal(first.view(-1)[64:128], first.view(-1)[:64])  # later chunks: own seeds
    model = tiny_backend.model
    before = snapshot(model)
    space = FullParameterSpace(model)
    space.apply(Candidate(seed=9, scale=0.1))
    for name, param in model.named_parameters():
        expected = (space.master[name] + 0.1 * noise(param.shape, 9, name)).to(param.dtype)
        assert torch.equal(param, expected), name
    space.restore()
    assert_bit_identical(model, before)


def test_rademacher_signs_follow_the_documented_bit_layout():
    """Element i is +1 iff bit i % 8 (least significant first) of byte i // 8 is set, for any length."""
    import numpy as np

    from evotune.spaces.noise import derive_seed, rademacher_bytes

    for count in (8, 13, 1000):
        values = noise((count,), 7, "w", "rademacher")
        packed = rademacher_bytes(count, derive_seed(7, "w"))
        bits = np.unpackbits(packed, bitorder="little")[:count]
        assert values.tolist() == (bits.astype(np.float32) * 2 - 1).tolist()
    # A shorter tensor is a prefix of a longer one drawn from the same seed (same stream).
    assert torch.equal(noise((13,), 7, "w", "rademacher"), noise((1000,), 7, "w", "rademacher")[:13])

"""evotune.spaces.noise: noise as a pure function of (seed, tensor name, chunk), of either kind."""

from __future__ import annotations

import hashlib
import sys

import numpy as np
import pytest
import torch

from evotune.spaces import noise
from evotune.spaces.noise import derive_seed, rademacher_bytes


def digest(tensor: torch.Tensor) -> str:
    """conftest.digest_tensors of {"": tensor}: sha256 of the name "" and the raw bytes."""
    return hashlib.sha256(tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


@pytest.mark.parametrize("kind", ["gaussian", "rademacher"])
def test_noise_is_the_same_in_another_process(kind, fresh_process_digests):
    assert fresh_process_digests[f"noise/{kind}"] == digest(noise((7, 33), 123456789, "layers.0.weight", kind))


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


def test_chunks_have_their_own_seeds(monkeypatch):
    """Chunk 0 is the one-chunk definition; later chunks are drawn from their own seeds."""
    monkeypatch.setattr(sys.modules["evotune.spaces.noise"], "CHUNK_SIZE", 64)  # the package's `noise` is the function
    first = noise((10, 20), 5, "w")
    assert torch.equal(first.view(-1)[:64], noise((64,), 5, "w"))
    assert not torch.equal(first.view(-1)[64:128], first.view(-1)[:64])


def test_rademacher_signs_follow_the_documented_bit_layout():
    """Element i is +1 iff bit i % 8 (least significant first) of byte i // 8 is set, for any length."""
    for count in (8, 13, 1000):
        values = noise((count,), 7, "w", "rademacher")
        packed = rademacher_bytes(count, derive_seed(7, "w"))
        bits = np.unpackbits(packed, bitorder="little")[:count]
        assert values.tolist() == (bits.astype(np.float32) * 2 - 1).tolist()
    # A shorter tensor is a prefix of a longer one drawn from the same seed (same stream).
    assert torch.equal(noise((13,), 7, "w", "rademacher"), noise((1000,), 7, "w", "rademacher")[:13])


def test_noise_fingerprints_tell_generators_apart():
    """The fingerprint is a pure function of the noise a device draws: the same on every call (and, for
    rademacher, on every device: numpy draws it), different between the two kinds."""
    from evotune.spaces.noise import noise_fingerprint

    assert noise_fingerprint("gaussian") == noise_fingerprint("gaussian", torch.device("cpu"))
    assert noise_fingerprint("rademacher") != noise_fingerprint("gaussian")
    if torch.cuda.is_available():
        assert noise_fingerprint("rademacher", "cuda") == noise_fingerprint("rademacher")

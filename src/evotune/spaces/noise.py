"""Noise regenerated from integers.

ES at Scale (Qiu et al. 2025) never stores or sends noise: a member is an integer seed,
and every worker regenerates the same perturbation from it. Here the noise for one
tensor is a pure function of (member seed, parameter name): independent across
tensors (two same-shape tensors do not share noise) and the same in every process.
"""

from __future__ import annotations

import hashlib

import torch

NOISE_KINDS = ("gaussian", "rademacher")


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any mix of ints and strings, stable across processes and runs."""
    text = "\x1f".join(str(part) for part in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 1


def noise(shape: torch.Size | tuple[int, ...], seed: int, name: str, kind: str = "gaussian",
          device: torch.device | str = "cpu") -> torch.Tensor:
    """fp32 noise of `shape` for tensor `name` of the member with `seed`.

    gaussian: N(0, 1), the paper's choice. rademacher: +-1 with equal probability,
    same mean and covariance (so the same ES gradient estimate in expectation) and
    about ten times cheaper to draw on a CPU, where drawing noise rivals generation.
    """
    generator = torch.Generator(device=device)
    generator.manual_seed(derive_seed(seed, name))
    if kind == "gaussian":
        return torch.randn(shape, generator=generator, device=device, dtype=torch.float32)
    if kind == "rademacher":
        count = 1
        for size in shape:
            count *= size
        packed = torch.randint(0, 256, ((count + 7) // 8,), generator=generator, device=device,
                               dtype=torch.uint8)  # 8 signs per byte
        shifts = torch.arange(8, device=device, dtype=torch.uint8)
        bits = (packed.unsqueeze(1) >> shifts).bitwise_and_(1).reshape(-1)[:count]  # (count,) in {0, 1}
        return bits.to(torch.float32).mul_(2.0).sub_(1.0).reshape(shape)
    raise ValueError(f"unknown noise kind {kind!r}; choose one of {NOISE_KINDS}")

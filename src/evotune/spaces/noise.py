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


# Noise is drawn in chunks of this many elements, each from its own seeded generator, so a
# large tensor (an embedding matrix) can be perturbed piece by piece with one small buffer,
# and the values do not depend on how a worker chooses to split the work.
CHUNK_SIZE = 1 << 22


def fill_noise_chunk(out: torch.Tensor, seed: int, name: str, chunk: int, kind: str = "gaussian") -> torch.Tensor:
    """Fill the 1-D fp32 `out` with chunk `chunk` of tensor `name`'s noise for member `seed`.

    gaussian: N(0, 1), the paper's choice. rademacher: +-1 with equal probability, the same
    mean and covariance (so the same ES gradient estimate in expectation) and several times
    cheaper to draw on a CPU, where drawing noise rivals generation.
    """
    generator = torch.Generator(device=out.device)
    # chunk 0 keeps the plain (seed, name) seed, so tensors of one chunk need no chunk index
    generator.manual_seed(derive_seed(seed, name) if chunk == 0 else derive_seed(seed, name, chunk))
    if kind == "gaussian":
        return out.normal_(generator=generator)
    if kind == "rademacher":
        count = out.numel()
        packed = torch.randint(0, 256, ((count + 7) // 8,), generator=generator, device=out.device,
                               dtype=torch.uint8)  # 8 signs per byte
        shifts = torch.arange(8, device=out.device, dtype=torch.uint8)
        bits = (packed.unsqueeze(1) >> shifts).bitwise_and_(1).reshape(-1)[:count]  # (count,) in {0, 1}
        return out.copy_(bits).mul_(2.0).sub_(1.0)
    raise ValueError(f"unknown noise kind {kind!r}; choose one of {NOISE_KINDS}")


def noise(shape: torch.Size | tuple[int, ...], seed: int, name: str, kind: str = "gaussian",
          device: torch.device | str = "cpu") -> torch.Tensor:
    """The whole fp32 noise tensor of `shape` for tensor `name` of the member with `seed`."""
    out = torch.empty(shape, device=device, dtype=torch.float32)
    flat = out.view(-1)
    for chunk, start in enumerate(range(0, flat.numel(), CHUNK_SIZE)):
        fill_noise_chunk(flat[start:start + CHUNK_SIZE], seed, name, chunk, kind)
    return out

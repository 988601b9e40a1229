"""Integer seeds derived from names: the same numbers in every process, on every machine.

ES at Scale (Qiu et al. 2025) never stores or sends noise, only seeds; every layer (the
strategies' member seeds, the spaces' per-tensor noise, the trainer's prompt batches) derives
its seeds here, so this module depends on nothing but hashlib.
"""

from __future__ import annotations

import hashlib


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any mix of ints and strings, stable across processes and runs."""
    text = "\x1f".join(str(part) for part in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 1

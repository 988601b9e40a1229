"""Tensor-parallel shards: where the piece of a tensor that one rank holds sits in the whole tensor.

With tensor parallelism (vLLM's `tensor_parallel_size`) every rank holds a slice of each weight:
column-parallel layers (q/k/v, gate/up) a slice of rows, row-parallel layers (o_proj, down_proj) a
slice of columns, the vocabulary-parallel embedding a slice of rows; norms are whole on every rank.
ES noise is defined on the whole tensor (noise(seed, name) drawn CHUNK_SIZE elements at a time,
spaces/noise.py), so for TP=2 to give the same weights as TP=1, each rank must perturb its slice with
exactly the matching elements of that global noise. `Shard.pieces` maps every global noise chunk to
the contiguous run of the rank's own (flattened) elements it covers and gathers their values.

Cost: a rank still draws every noise chunk its slice touches, which for a column slice is every chunk
of the tensor, so noise generation per rank does not shrink with TP (the matmuls do).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Shard:
    """The local tensor is global[..., start:start + length, ...] along `dim` (length: its own size there)."""

    global_shape: tuple[int, ...]
    dim: int
    start: int

    def layout(self, local_shape: tuple[int, ...]) -> tuple[int, int, int, int]:
        """(outer, global length along dim, local length, inner) of the (outer, dim, inner) view."""
        if len(local_shape) != len(self.global_shape) or any(
                a != b for axis, (a, b) in enumerate(zip(local_shape, self.global_shape)) if axis != self.dim):
            raise ValueError(f"shard of shape {tuple(local_shape)} does not fit global shape {self.global_shape} "
                             f"along dim {self.dim}")
        length = local_shape[self.dim]
        if not 0 <= self.start <= self.start + length <= self.global_shape[self.dim]:
            raise ValueError(f"shard [{self.start}, {self.start + length}) lies outside dim {self.dim} of "
                             f"{self.global_shape}")
        outer = math.prod(self.global_shape[:self.dim])
        inner = math.prod(self.global_shape[self.dim + 1:])
        return outer, self.global_shape[self.dim], length, inner

    def _local_count_below(self, index: int, local_shape: tuple[int, ...]) -> int:
        """How many local elements have a global flat index below `index` (the map is increasing)."""
        outer, global_length, length, inner = self.layout(local_shape)
        block = global_length * inner  # global elements per outer index
        whole, rest = divmod(index, block)
        if whole >= outer:
            return outer * length * inner
        return whole * length * inner + min(max(rest - self.start * inner, 0), length * inner)

    def global_index(self, local: torch.Tensor, local_shape: tuple[int, ...]) -> torch.Tensor:
        """Global flat indices of the local flat indices `local` (int64)."""
        _, global_length, length, inner = self.layout(local_shape)
        block, position = local // (length * inner), local % (length * inner)
        return block * (global_length * inner) + self.start * inner + position

    def pieces(self, local_shape: tuple[int, ...], chunk_size: int) -> Iterator[tuple[int, int, int, int]]:
        """(global chunk index, global chunk start, local start, local end) for every chunk that holds local
        elements: local elements [local start, local end) take their values from that chunk."""
        total = math.prod(self.global_shape)
        for chunk, first in enumerate(range(0, total, chunk_size)):
            low = self._local_count_below(first, local_shape)
            high = self._local_count_below(min(first + chunk_size, total), local_shape)
            if high > low:
                yield chunk, first, low, high

    def gather(self, chunk_values: torch.Tensor, chunk_start: int, local_start: int, local_end: int,
               local_shape: tuple[int, ...], out: torch.Tensor) -> torch.Tensor:
        """Write the values of local elements [local_start, local_end) into `out` (local_end - local_start,),
        from `chunk_values`, the global noise chunk that starts at global flat index `chunk_start`."""
        outer, _, _, inner = self.layout(local_shape)
        if outer == 1:  # a slice of whole rows of the flattened tensor: one contiguous run
            offset = self.start * inner + local_start - chunk_start
            return out.copy_(chunk_values[offset:offset + out.numel()])
        local = torch.arange(local_start, local_end, device=chunk_values.device)
        positions = self.global_index(local, local_shape) - chunk_start
        return torch.index_select(chunk_values, 0, positions, out=out)


def assemble(pieces: list[tuple[torch.Tensor, Shard | None]]) -> torch.Tensor:
    """The whole tensor from the ranks' pieces (replicated pieces simply overwrite identical values)."""
    first, shard = pieces[0]
    whole = torch.empty(shard.global_shape if shard else first.shape, dtype=first.dtype)
    for tensor, shard in pieces:
        if shard is None:
            whole.copy_(tensor)
        else:
            whole.narrow(shard.dim, shard.start, tensor.shape[shard.dim]).copy_(tensor)
    return whole


def local_slice(whole: torch.Tensor, shard: Shard | None, local_shape: tuple[int, ...]) -> torch.Tensor:
    """The rank's piece of the whole tensor (inverse of assemble)."""
    if shard is None:
        return whole
    return whole.narrow(shard.dim, shard.start, local_shape[shard.dim])

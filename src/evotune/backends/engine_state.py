"""The fp32 mean of a vLLM engine as files: how state crosses the engine's process boundary.

On CUDA (and with `engine_core: separate_process` on CPU) vLLM's engine core is another process that
reaches its workers through msgpack, which has no tensor type: a tensor returned by collective_rpc
arrives as nested lists. So each tensor-parallel rank writes its part of the mean to a safetensors file
(with where each slice sits in the HF tensor), the driver assembles the whole HF state dict, and
loading goes the other way: one file of whole tensors, each rank reading only its slices. No vllm import.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ..spaces.shards import Shard, assemble

SHARDS_KEY = "evotune_shards"  # safetensors metadata: {name: [global shape, dim, start]} for sharded tensors


def save_rank_state(directory: str, rank: int, tensors: dict[str, torch.Tensor], shards: dict[str, Shard]) -> str:
    path = Path(directory) / f"rank-{rank}.safetensors"
    layout = {name: [list(shard.global_shape), shard.dim, shard.start] for name, shard in shards.items()
              if name in tensors}
    save_file({name: tensor.detach().to("cpu").contiguous() for name, tensor in tensors.items()}, str(path),
              metadata={SHARDS_KEY: json.dumps(layout)})
    return str(path)


def assemble_ranks(paths: list[str]) -> dict[str, torch.Tensor]:
    """The whole HF tensors from every rank's file (evotune_save_state's results, in rank order)."""
    pieces: dict[str, list[tuple[torch.Tensor, Shard | None]]] = {}
    for path in paths:
        with safe_open(path, framework="pt") as handle:
            layout = json.loads((handle.metadata() or {}).get(SHARDS_KEY, "{}"))
            for name in handle.keys():
                shard = Shard(tuple(layout[name][0]), layout[name][1], layout[name][2]) if name in layout else None
                pieces.setdefault(name, []).append((handle.get_tensor(name), shard))
    return {name: assemble(parts) for name, parts in pieces.items()}


def read_rank_slices(path: str, master: dict[str, torch.Tensor], shards: dict[str, Shard]) -> dict[str, torch.Tensor]:
    """This rank's part of every tensor in `master` from a file of whole HF tensors (only those bytes read)."""
    out = {}
    with safe_open(path, framework="pt") as handle:
        present = set(handle.keys())
        for name, local in master.items():
            if name not in present:
                continue  # load_state_tensors names what is missing
            shard = shards.get(name)
            if shard is None:
                out[name] = handle.get_tensor(name)
                continue
            index = [slice(None)] * len(shard.global_shape)
            index[shard.dim] = slice(shard.start, shard.start + local.shape[shard.dim])
            out[name] = handle.get_slice(name)[tuple(index)]
    return out

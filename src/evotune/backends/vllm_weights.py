"""Hugging Face parameter names inside a vLLM engine's fused, tensor-parallel weights (no vllm import here).

vLLM fuses q/k/v into `qkv_proj` and gate/up into `gate_up_proj`, concatenated along the output
dimension (rows) in that order. ES noise is defined on Hugging Face names (noise(seed, hf_name)),
so that a run on vLLM perturbs exactly what the same run on the hf backend perturbs and its
checkpoints stay HF state dicts. `engine_pieces` cuts each fused engine tensor into row-slice views
named like the HF parameters; a FullParameterSpace over those views then perturbs, restores and
updates the engine's weights in place with the same math and the same fp32 master copy.

With tensor parallelism (`tensor_parallel_size` > 1) each rank holds a shard of every layer, read off
the layer's own attributes (vLLM's linear.py and vocab_parallel_embedding.py): column-parallel layers
(QKVParallelLinear, MergedColumnParallelLinear, ColumnParallelLinear) a slice of rows of each fused part,
with key/value heads replicated when there are fewer of them than ranks; row-parallel layers
(RowParallelLinear: o_proj, down_proj) a slice of columns, their bias whole; the vocabulary-parallel
embedding and LM head a slice of rows plus padding. Every view then carries its `Shard` (where it sits
in the HF tensor), so the space draws the same global noise as TP=1 and keeps the matching part.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from ..spaces.shards import Shard

FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
# Vocabulary-sized tensors, whose rows vLLM pads (VocabParallelEmbedding, ParallelLMHead).
VOCAB_TENSORS = ("embed_tokens.weight", "lm_head.weight")


def split_sizes(hf_shapes: dict[str, tuple[int, ...]], engine_name: str) -> list[tuple[str, int]]:
    """[(HF name, rows)] that make up `engine_name` on one GPU, in concatenation order ([(same, rows)] if
    unfused)."""
    module, _, leaf = engine_name.rpartition(".")  # e.g. "model.layers.0.self_attn.qkv_proj", "weight"
    prefix, _, projection = module.rpartition(".")
    if projection in FUSED:
        names = [f"{prefix}.{part}.{leaf}" for part in FUSED[projection]]
        missing = [name for name in names if name not in hf_shapes]
        if missing:
            raise KeyError(f"engine tensor {engine_name} fuses {missing}, which the HF model does not have")
        return [(name, hf_shapes[name][0]) for name in names]
    if engine_name not in hf_shapes:
        raise KeyError(f"engine tensor {engine_name} has no HF counterpart of the same name")
    return [(engine_name, hf_shapes[engine_name][0])]


def _owner(model: Any, engine_name: str) -> Any:
    """The module holding `engine_name` (None when the model is not a module tree, e.g. a test stand-in)."""
    try:
        return model.get_submodule(engine_name.rpartition(".")[0])
    except (AttributeError, TypeError):
        return None


def row_layout(module: Any, pieces: list[tuple[str, int]]) -> list[tuple[str, int, int]]:
    """[(HF name, local rows, global start row)] of a column-parallel or vocabulary tensor on this rank.

    `pieces`: split_sizes' [(HF name, global rows)]. A layer without tensor parallelism (tp_size 1, or no
    such attribute) holds every row.
    """
    size, rank = getattr(module, "tp_size", 1), getattr(module, "tp_rank", 0)
    if size == 1 or module is None:
        return [(name, rows, 0) for name, rows in pieces]
    indices = getattr(module, "shard_indices", None)
    if indices is not None:  # vocabulary-parallel: this rank's original-vocabulary rows, then padding
        [(name, _)] = pieces
        return [(name, indices.org_vocab_end_index - indices.org_vocab_start_index, indices.org_vocab_start_index)]
    if hasattr(module, "num_kv_head_replicas"):  # q/k/v: query heads split, key/value heads split or replicated
        query = module.num_heads * module.head_size
        key = module.num_kv_heads * module.head_size
        value = module.num_kv_heads * getattr(module, "v_head_size", module.head_size)
        kv_rank = rank // module.num_kv_head_replicas
        return [(pieces[0][0], query, rank * query), (pieces[1][0], key, kv_rank * key),
                (pieces[2][0], value, kv_rank * value)]
    return [(name, rows // size, rank * (rows // size)) for name, rows in pieces]  # column-parallel parts


def engine_pieces(named_tensors: Iterable[tuple[str, torch.Tensor]], hf_shapes: dict[str, tuple[int, ...]],
                  model: Any = None) -> list[tuple[str, torch.Tensor, Shard | None]]:
    """(HF name, view into the engine tensor, its Shard or None when whole) for every HF parameter the
    engine holds (on this rank). `named_tensors`: the engine model's named_parameters(); `model`: that
    model, whose layers say how they are sharded (None: no tensor parallelism).

    Row slices of a contiguous tensor are contiguous, so writes through a view land in the engine's own
    storage: no copy of the model is made. An engine tensor HF does not have (none for Llama/Qwen) is an
    error rather than silently left unperturbed; a tied tensor (LM head = embedding) is listed once.
    """
    out, seen = [], set()
    for engine_name, tensor in named_tensors:
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        module = None if model is None else _owner(model, engine_name)
        # an engine with LoRA enabled wraps each Linear: its weight is "<module>.base_layer.weight"
        hf_engine_name = engine_name.replace(".base_layer.", ".")
        leaf = hf_engine_name.rpartition(".")[2]
        column_split = module is not None and hasattr(module, "input_is_parallel")  # row-parallel: columns
        if column_split and leaf == "weight" and getattr(module, "tp_size", 1) > 1:
            [(name, _)] = split_sizes(hf_shapes, hf_engine_name)
            columns = tensor.shape[1]
            out.append((name, tensor.data, Shard(tuple(hf_shapes[name]), 1, module.tp_rank * columns)))
            continue
        layout = row_layout(None if column_split else module, split_sizes(hf_shapes, hf_engine_name))
        rows_total = sum(rows for _, rows, _ in layout)
        if rows_total < tensor.shape[0] and hf_engine_name.endswith(VOCAB_TENSORS):
            # vLLM pads the vocabulary to a multiple of 64 rows; the padding rows are never used (no
            # token id reaches them) and have no HF counterpart, so they are left out, never perturbed.
            tensor = tensor[:rows_total]
        if rows_total != tensor.shape[0]:
            raise ValueError(f"engine tensor {engine_name} has {tensor.shape[0]} rows, the HF parts "
                             f"{[name for name, _, _ in layout]} add up to {rows_total} on this rank")
        first = 0
        for name, rows, global_start in layout:
            view = tensor.data[first:first + rows]
            whole = tuple(hf_shapes[name])
            if tuple(view.shape) == whole:
                out.append((name, view, None))
            else:
                shard = Shard(whole, 0, global_start)
                shard.layout(tuple(view.shape))  # raises if the slice does not fit
                out.append((name, view, shard))
            first += rows
    return out


def hf_views(named_tensors: Iterable[tuple[str, torch.Tensor]],
             hf_shapes: dict[str, tuple[int, ...]]) -> list[tuple[str, torch.Tensor]]:
    """(HF name, view) of an engine without tensor parallelism."""
    return [(name, view) for name, view, _ in engine_pieces(named_tensors, hf_shapes)]

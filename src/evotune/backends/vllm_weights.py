"""Hugging Face parameter names inside a vLLM engine's fused weights (no vllm import here).

vLLM fuses q/k/v into `qkv_proj` and gate/up into `gate_up_proj`, concatenated along the output
dimension (rows) in that order. ES noise is defined on Hugging Face names (noise(seed, hf_name)),
so that a run on vLLM perturbs exactly what the same run on the hf backend perturbs and its
checkpoints stay HF state dicts. `hf_views` cuts each fused engine tensor into row-slice views
named like the HF parameters; a FullParameterSpace over those views then perturbs, restores and
updates the engine's weights in place with the same math and the same fp32 master copy.
(Single-GPU engines: with tensor parallelism each rank holds a shard of every fused block, which
this layout does not describe; the vllm backend refuses tensor_parallel_size > 1.)
"""

from __future__ import annotations

from typing import Iterable

import torch

FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
# Vocabulary-sized tensors, whose rows vLLM pads (VocabParallelEmbedding, ParallelLMHead).
VOCAB_TENSORS = ("embed_tokens.weight", "lm_head.weight")


def split_sizes(hf_shapes: dict[str, tuple[int, ...]], engine_name: str) -> list[tuple[str, int]]:
    """[(HF name, rows)] that make up `engine_name`, in concatenation order ([(same, rows)] if unfused)."""
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


def hf_views(engine_tensors: Iterable[tuple[str, torch.Tensor]],
             hf_shapes: dict[str, tuple[int, ...]]) -> list[tuple[str, torch.Tensor]]:
    """(HF name, view into the engine tensor) for every HF parameter the engine holds.

    Row slices of a contiguous tensor are contiguous, so writes through a view land in the
    engine's own storage: no copy of the model is made. An engine tensor HF does not have
    (none for Llama/Qwen) is an error rather than silently left unperturbed.
    """
    views = []
    for engine_name, tensor in engine_tensors:
        # an engine with LoRA enabled wraps each Linear: its weight is "<module>.base_layer.weight"
        engine_name = engine_name.replace(".base_layer.", ".")
        pieces = split_sizes(hf_shapes, engine_name)
        rows_total = sum(rows for _, rows in pieces)
        if rows_total < tensor.shape[0] and engine_name.endswith(VOCAB_TENSORS):
            # vLLM pads the vocabulary to a multiple of 64 rows; the padding rows are never used (no
            # token id reaches them) and have no HF counterpart, so they are left out, never perturbed.
            tensor = tensor[:rows_total]
        if rows_total != tensor.shape[0]:
            raise ValueError(f"engine tensor {engine_name} has {tensor.shape[0]} rows, the HF parts "
                             f"{[name for name, _ in pieces]} add up to {sum(rows for _, rows in pieces)}")
        start = 0
        for name, rows in pieces:
            view = tensor.data[start:start + rows]
            if tuple(view.shape) != tuple(hf_shapes[name]):
                raise ValueError(f"{name}: engine slice {tuple(view.shape)} != HF shape {tuple(hf_shapes[name])}")
            views.append((name, view))
            start += rows
    return views

"""How far the mean has moved from the base weights: the `drift/` metrics, and the base snapshot they and
anchored weight decay (optimizers/rules.py) need.

Weight spaces (full, lowrank) keep the base in the weights' own dtype on the host. That copy is exact: the
fp32 master starts as the upcast of those very values, so a bfloat16 model's base costs 2 bytes per trained
weight (4 for float32), not the 4 of an fp32 copy. Metrics (float64 sums, so 1e9 squares do not lose digits):

    drift/l2                    ||mean - base||, over every trained weight
    drift/relative_l2           ||mean - base|| / ||base||
    drift/relative_l2/<group>   the same within one group of parameters (GROUPS, from the parameter's name)
    drift/changed_fraction      share of trained weights whose value in the model's dtype (what the model
                                holds and generates with) differs from the base's: moved past the dtype's
                                resolution. A bfloat16 weight flips after a relative change of 2^-9 to 2^-8.

The sums are plain numbers, so tensor-parallel ranks (vLLM engines) add theirs up before the ratios. The base's
sum of squares is computed once per parameter and kept with the snapshot (BaseWeights): the base never changes.

Adapter spaces (lora, svd_lora) keep their starting vector (small) instead, and report

    drift/l2                    ||vector - start|| of the searched vector (LoRA entries or singular-value offsets)
    drift/relative_l2           relative change of the searched quantities (LoRA entries; svd_lora: the
                                searched singular values S' against the starting S)
    drift/merged_relative_l2    ||delta W(vector) - delta W(start)|| / ||W0||: what the search changed in the
                                merged weights (delta W = scaling * B A per adapted module), relative to those
                                modules' base weights W0 (left out on a quantized base)
    drift/adapter_relative_l2   ||delta W(vector)|| / ||W0||: the whole adapter, its starting point included

||B A|| never forms B A: ||B A||_F^2 = sum((B^T B) * (A A^T)), two r x r Gram matrices (factor_product_squares).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

import numpy as np
import torch

from .noise import CHUNK_SIZE

# Parameter groups by name, first match wins (norms before attention: "post_attention_layernorm" is a norm).
GROUPS = (("norms", r"norm|(^|\.)ln_"), ("embeddings", r"embed|(^|\.)wte\.|(^|\.)wpe\.|lm_head"),
          ("attention", r"attn|attention|(q|k|v|o|qkv)_proj"),
          ("mlp", r"mlp|feed_forward|ffn|(gate|up|down|gate_up)_proj|fc\d|experts"))


def parameter_group(name: str) -> str:
    """attention / mlp / embeddings / norms, or other, from a parameter's name (e.g. HF Llama names)."""
    for group, pattern in GROUPS:
        if re.search(pattern, name):
            return group
    return "other"


class BaseWeights(dict):
    """The base, name -> tensor, with each tensor's sum of squares kept once computed: the base never changes,
    so every drift evaluation after the first reuses it instead of reading all the base weights again."""

    def __init__(self, tensors: Iterable[tuple[str, torch.Tensor]] | dict[str, torch.Tensor] = ()):
        super().__init__(tensors)
        self.squares: dict[str, float] = {}

    def squares_of(self, name: str, device: torch.device) -> float:
        """sum base[name]^2, computed on `device` (the mean's, as the difference is) the first time only."""
        if name not in self.squares:
            self.squares[name] = base_tensor_squares(self[name], device)
        return self.squares[name]


def snapshot(parameters: Iterable[tuple[str, torch.Tensor]]) -> BaseWeights:
    """The base: every parameter copied to the host in its own dtype (exact, see the module docstring)."""
    return BaseWeights((name, param.detach().to("cpu", copy=True)) for name, param in parameters)


@torch.no_grad()
def base_tensor_squares(base: torch.Tensor, device: torch.device) -> float:
    """sum base^2 of one tensor, chunk by chunk on `device`."""
    flat_base = base.reshape(-1)
    return sum(sum_of_squares(flat_base[start:start + CHUNK_SIZE].to(device))
               for start in range(0, flat_base.numel(), CHUNK_SIZE))


@torch.no_grad()
def tensor_sums(master: torch.Tensor, base: torch.Tensor) -> tuple[float, int, int]:
    """(sum (mean - base)^2, weights that differ in base's dtype, weights) of one tensor, chunk by chunk so no
    second full-size fp32 tensor is made. master: fp32, any device; base: the same shape."""
    difference_squares = 0.0
    changed = 0
    flat_master, flat_base = master.reshape(-1), base.reshape(-1)
    for start in range(0, flat_master.numel(), CHUNK_SIZE):
        mean_chunk = flat_master[start:start + CHUNK_SIZE]
        base_chunk = flat_base[start:start + CHUNK_SIZE].to(mean_chunk.device)
        difference = mean_chunk - base_chunk.to(torch.float32)  # (chunk,) fp32
        difference_squares += sum_of_squares(difference)
        changed += int((mean_chunk.to(base_chunk.dtype) != base_chunk).sum())  # rounded as the live weights are
    return difference_squares, changed, flat_master.numel()


def sum_of_squares(values: torch.Tensor) -> float:
    """sum(values^2) in float64, the same bits whatever the number of threads: torch's CPU sum splits its work
    among its threads, so its rounding depends on how many there are (a Ray worker runs with fewer than the
    driver); numpy's pairwise sum of the float64 squares runs on one. On a GPU, torch's own sum."""
    if values.device.type != "cpu":
        return float(torch.sum(values.to(torch.float32).square(), dtype=torch.float64))
    squares = np.square(values.detach().reshape(-1).to(torch.float64).numpy())  # (n,) float64, exact for fp32 inputs
    return float(np.add.reduce(squares))


def weight_sums(master: dict[str, torch.Tensor], base: dict[str, torch.Tensor],
                names: Iterable[str] | None = None) -> dict[str, list[float]]:
    """Per group, [difference squares, base squares, changed weights, weights] over `names` (default: all).
    A BaseWeights base (snapshot's) computes its squares once; a plain dict, at every call."""
    base = base if isinstance(base, BaseWeights) else BaseWeights(base)
    parts: dict[str, list[tuple]] = {}
    for name in (master if names is None else names):
        difference_squares, changed, count = tensor_sums(master[name], base[name])
        base_squares = base.squares_of(name, master[name].device)
        parts.setdefault(parameter_group(name), []).append((difference_squares, base_squares, changed, count))
    return {group: _column_sums(values) for group, values in parts.items()}


def add_sums(parts: Iterable[dict[str, list[float]]]) -> dict[str, list[float]]:
    """Several ranks' weight_sums added up group by group."""
    by_group: dict[str, list] = {}
    for part in parts:
        for group, values in part.items():
            by_group.setdefault(group, []).append(values)
    return {group: _column_sums(values) for group, values in by_group.items()}


def _column_sums(rows: list) -> list[float]:
    """Column sums of [difference squares, base squares, changed, count] rows. math.fsum is exactly rounded, so
    the totals do not depend on the order tensors, groups or tensor-parallel ranks are added in."""
    return [math.fsum(row[index] for row in rows) if index < 2 else sum(row[index] for row in rows)
            for index in range(4)]


def factor_product_squares(left: torch.Tensor, right: torch.Tensor) -> float:
    """||left @ right||_F^2 from Gram matrices, in float64: left (out, k), right (k, in), k small (LoRA rank).
    numpy's einsum loops on one thread (no BLAS), so, like sum_of_squares, the bits do not depend on the thread
    count."""
    left = left.detach().to("cpu", torch.float64).numpy()
    right = right.detach().to("cpu", torch.float64).numpy()
    left_gram = np.einsum("ok,ol->kl", left, left)  # (k, k)
    right_gram = np.einsum("ki,li->kl", right, right)  # (k, k)
    return float(np.add.reduce((left_gram * right_gram).reshape(-1)))


def ratio(numerator: float, denominator: float) -> float | None:
    """sqrt(numerator / denominator) of two sums of squares; None when the denominator is 0."""
    return math.sqrt(numerator / denominator) if denominator > 0 else None


def weight_drift(sums: dict[str, list[float]]) -> dict[str, float]:
    """The `drift/` record from weight_sums (or their add_sums over ranks)."""
    if not sums:
        return {}
    difference, base, changed, count = _column_sums(list(sums.values()))
    record = {"drift/l2": math.sqrt(difference), "drift/changed_fraction": changed / count if count else 0.0}
    if (relative := ratio(difference, base)) is not None:
        record["drift/relative_l2"] = relative
    for group, values in sorted(sums.items()):
        if (relative := ratio(values[0], values[1])) is not None:
            record[f"drift/relative_l2/{group}"] = relative
    return record

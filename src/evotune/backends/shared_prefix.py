"""Shared-prefix prefill: the token prefix every prompt of a batch starts with is computed once.

An ES candidate is scored on a batch of prompts that mostly start the same way: SmolLM2's chat
template alone puts a 21-token system prompt before every user turn, and tasks add instructions or
few-shot headers. Batched generate() recomputes those tokens for every row. Here the longest token
prefix common to the batch's (unpadded) prompts runs once, as a batch of one row per model variant
(one for a plain model, one per member under a population patch: the prefix's keys and values depend
on the weights), its KV cache is repeated to every row, and generate() continues from it.

Layout of the generate() input, per row (L prefix tokens, W = the longest remainder):

    [ prefix (L) | padding (W - len(remainder)) | remainder ]      attention mask 1 | 0 | 1

transformers derives position ids from the attention mask (cumsum - 1), so a remainder's tokens get
positions L, L + 1, ... exactly as they do in the whole, left-padded prompt, and the padding in the
middle is masked out of every query's keys. Only the cache's first L positions come from the prefix
pass; generate() prefills the W remaining columns and decodes as usual.

What differs from the plain path is only the order and shape of the floating-point work (a prefix
computed as a 1-row batch, attention over the cache): tests/backends/test_shared_prefix.py checks that
greedy completions are the same on the tiny model in float32 and bfloat16, and a slow test on SmolLM2.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

# Below this many shared tokens the extra forward call of the prefix pass costs about what it saves.
MINIMUM_PREFIX_TOKENS = 4


@dataclass(frozen=True)
class PrefixSplit:
    """A batch of prompts split into the prefix they share and each row's remainder.

    prefix: (1, L) ids every prompt starts with; input_ids / attention_mask: (rows, L + W), the
    layout of the module docstring (prefix, middle padding, remainder).
    """

    prefix: torch.Tensor
    input_ids: torch.Tensor
    attention_mask: torch.Tensor

    @property
    def rows(self) -> int:
        """Prompts in the batch."""
        return int(self.input_ids.shape[0])


def common_prefix_length(rows: Sequence[Sequence[int]]) -> int:
    """Tokens that every row starts with, leaving each row at least one token of its own (generate needs
    at least one input position past the cache to produce the first new token's logits)."""
    shortest = min(len(row) for row in rows)
    length = 0
    while length < shortest - 1 and all(row[length] == rows[0][length] for row in rows):
        length += 1
    return length


def split_prompts(rows: Sequence[Sequence[int]], pad_token_id: int, device: torch.device | str,
                  minimum: int = MINIMUM_PREFIX_TOKENS) -> PrefixSplit | None:
    """The prefix split of a batch of token id lists; None when fewer than two rows share `minimum` tokens
    (then the plain left-padded batch does the same work)."""
    if len(rows) < 2:
        return None
    length = common_prefix_length(rows)
    if length < minimum:
        return None
    remainders = [list(row[length:]) for row in rows]
    width = max(len(remainder) for remainder in remainders)
    prefix = list(rows[0][:length])
    input_ids = [prefix + [pad_token_id] * (width - len(rest)) + rest for rest in remainders]
    mask = [[1] * length + [0] * (width - len(rest)) + [1] * len(rest) for rest in remainders]
    return PrefixSplit(torch.tensor([prefix], device=device), torch.tensor(input_ids, device=device),
                       torch.tensor(mask, device=device))


def exact_for(model: Any) -> bool:
    """Whether the prefix pass gives exactly the plain batch's greedy completions for `model`: float32
    weights, not quantized. Measured (bench/results/speed/shared_prefix_*.json): identical in float32 on the tiny
    model and SmolLM2; in bfloat16, 2 of SmolLM2's 32 arithmetic completions (10 tokens) and 12 of its 16
    Countdown completions (48 tokens) differ (bfloat16 completions also change with the plain batch's
    shape, e.g. its generation_batch_size)."""
    return getattr(model, "dtype", None) == torch.float32 and getattr(model, "hf_quantizer", None) is None


def _accepts_logits_to_keep(model: Any) -> bool:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT passes kwargs through
    return "logits_to_keep" in inspect.signature(base.forward).parameters


def prefill(model: Any, prefix: torch.Tensor) -> tuple[str, Any]:
    """Run `prefix` (variants, L) through `model` once; (generate's keyword for a cache, the KV cache).

    Only the last position's logits are kept where the model allows it: the prefix pass needs the
    cache, not (variants, L, vocab) logits. transformers 5 names the cache `cache`, 4.x
    `past_key_values`; the keyword generate() takes is the name the forward returned it under.
    """
    extra = {"logits_to_keep": 1} if _accepts_logits_to_keep(model) else {}
    output = model(input_ids=prefix, attention_mask=torch.ones_like(prefix), use_cache=True, **extra)
    name = "cache" if "cache" in output else "past_key_values"
    return name, output[name]


def generate_after_prefix(model: Any, split: PrefixSplit, variants: int = 1,
                          patch: Callable[[int], AbstractContextManager] | None = None,
                          **generate_kwargs: Any) -> torch.Tensor:
    """New token ids (variants * rows, new) of the split batch, tiled `variants` times variant-major.

    patch(rows_per_variant): a context under which batch row r runs variant r // rows_per_variant (a
    population of adapters or low-rank deltas, backends/multi_lora.py); None for a plain model. The
    prefix runs as one row per variant, and each variant's cache row is repeated to its `rows` rows.
    """
    within = patch or (lambda rows: nullcontext())
    with within(1):
        name, cache = prefill(model, split.prefix.repeat(variants, 1))  # cache: (variants, heads, L, head_dim)
    cache.batch_repeat_interleave(split.rows)  # (variants * rows, heads, L, head_dim), variant-major
    input_ids = split.input_ids.repeat(variants, 1)  # (variants * rows, L + W)
    attention_mask = split.attention_mask.repeat(variants, 1)
    with within(split.rows):
        output = model.generate(input_ids=input_ids, attention_mask=attention_mask, **{name: cache},
                                **generate_kwargs)  # (variants * rows, L + W + new)
    return output[:, input_ids.shape[1]:]

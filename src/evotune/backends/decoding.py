"""Greedy decoding without a host round trip per token: transformers' greedy loop, with its stopping checks batched.

transformers' `generate` waits for the device twice per new token (found by counting host syncs per decoding step,
tests/backends/test_decoding_syncs.py; transformers 5.24):

1. its stop check reads `unfinished_sequences.max() == 0` into a Python bool after every step;
2. in a padded batch under SDPA with a dynamic cache, building each step's attention mask asks whether the padding
   mask is all ones (`masking_utils._ignore_causal_mask_sdpa`: `fast_all(padding_mask)`), to skip the mask if so.

On a GPU each such read stalls the host until the device has finished the step, so the next step's kernels are
launched only after it: the device idles for every step's Python and launch time. `greedy_decode` is passed to
`generate(custom_generate=...)`, which prepares inputs, cache, logits processors and stopping criteria exactly as
for its own greedy loop and then calls it; it runs that loop's steps (the same prefill, forward, logits processors,
argmax and padding of finished rows), with two changes that leave the tokens unchanged:

1. on an accelerator it reads whether every row has finished only every STOP_CHECK_EVERY steps (on a CPU, where
   a read waits for nothing, every step), and stops at max_length as before; the steps run past the end append
   padding to every row and are cut off after the loop, at the first step after which every row had finished,
   counted on the device (one read per generate);
2. in a padded batch, the mask question of (2) has a known answer at every decoding step of a full-attention
   layer: the padding columns are inside every step's keys, so the mask is not all ones and is never skipped;
   `known_padding` answers it without reading the device. Sliding-window layers still ask (their window can slide
   past the padding).

Greedy tokens are the same as generate's own loop (tests/backends/test_decoding_syncs.py: tiny model, float32,
rows of different prompt lengths, rows that stop at EOS early, a batch that stops before max_new_tokens).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch

# Decoding steps between reads of "has every row finished" on an accelerator: up to this many - 1 steps run past
# the last row's EOS (their tokens are cut off), in exchange for one host sync per this many steps, not one per step.
STOP_CHECK_EVERY = 8


def stop_check_every(device: torch.device) -> int:
    """Steps between reads of "has every row finished": on a CPU every step (the read waits for nothing, there is no
    queue of launched work, while a step past the end costs a whole step); elsewhere STOP_CHECK_EVERY."""
    return 1 if device.type == "cpu" else STOP_CHECK_EVERY


@functools.cache
def supported() -> bool:
    """Whether this transformers runs a callable `custom_generate` with the prefill and input-preparation steps
    greedy_decode reuses (transformers 5); otherwise generate() runs its own loop."""
    from transformers.generation.utils import GenerationMixin

    if not hasattr(GenerationMixin, "_prefill"):
        return False
    generate = inspect.signature(GenerationMixin.generate).parameters
    prepare = inspect.signature(GenerationMixin.prepare_inputs_for_generation).parameters
    return "custom_generate" in generate and "next_sequence_length" in prepare


@contextmanager
def transformers_loop() -> Iterator[None]:
    """Within the block the hf backend decodes with transformers' own greedy loop, which reads the device after
    every token (its stop check, and the attention mask's padding check): the path before greedy_decode, for
    timing the two side by side (bench/speed/overhead.py, bench/gpu_check/check.py)."""
    original = globals()["supported"]
    globals()["supported"] = lambda: False
    try:
        yield
    finally:
        globals()["supported"] = original


@contextmanager
def known_padding() -> Iterator[None]:
    """Within the block, a full-attention decoding step (one query) with a padding mask takes the mask without
    asking the device whether the padding mask is all ones: the caller knows the batch is padded, so it is not,
    and `_ignore_causal_mask_sdpa` would return False after reading it. Other calls go to the original."""
    from transformers import masking_utils

    original = getattr(masking_utils, "_ignore_causal_mask_sdpa", None)
    if original is None:  # another transformers: nothing to answer, the mask code asks as it does
        yield
        return

    def ignore_causal_mask(padding_mask: torch.Tensor | None, q_length: int, kv_length: int, q_offset: Any,
                           kv_offset: int, local_attention_size: int | None = None) -> bool:
        if padding_mask is not None and q_length == 1 and local_attention_size is None:
            return False
        return original(padding_mask, q_length, kv_length, q_offset, kv_offset, local_attention_size)

    masking_utils._ignore_causal_mask_sdpa = ignore_causal_mask
    try:
        yield
    finally:
        masking_utils._ignore_causal_mask_sdpa = original


def _next_tokens(outputs: Any, input_ids: torch.Tensor, logits_processor: Any,
                 unfinished: torch.Tensor, pad_token_id: torch.Tensor | None) -> torch.Tensor:
    """(rows,) greedy tokens from a forward's last-position logits, padding for finished rows (as generate)."""
    logits = outputs.logits[:, -1].to(copy=True, dtype=torch.float32, device=input_ids.device)  # (rows, vocab)
    tokens = torch.argmax(logits_processor(input_ids, logits), dim=-1)  # (rows,)
    if pad_token_id is not None:
        tokens = tokens * unfinished + pad_token_id * (1 - unfinished)
    return tokens


def greedy_decode(model: Any, input_ids: torch.Tensor, logits_processor: Any, stopping_criteria: Any,
                  generation_config: Any, **model_kwargs: Any) -> torch.Tensor:
    """generate()'s greedy loop (GenerationMixin._sample with do_sample=False) with the stop check read every
    stop_check_every(device) steps; returns (rows, prompt + new) ids, the same as generate's. For `custom_generate`.
    Not thread-safe while a batch is padded (known_padding swaps a transformers function for the loop's duration)."""
    if generation_config.do_sample or generation_config.return_dict_in_generate:
        raise ValueError("greedy_decode returns greedy token ids only: call generate() without it")
    rows, prompt_length = input_ids.shape
    max_length = stopping_criteria.max_length
    has_eos = any(hasattr(criteria, "eos_token_id") for criteria in stopping_criteria)
    pad_token_id = generation_config._pad_token_tensor if has_eos else None
    pad_token_id = pad_token_id.to(input_ids.device) if pad_token_id is not None else None
    unfinished = torch.ones(rows, dtype=torch.long, device=input_ids.device)  # (rows,) 1 until a row stops
    # steps after which some row was still unfinished: generate stops after step (this + 1)
    steps_unfinished = torch.zeros((), dtype=torch.long, device=input_ids.device)
    forward = (model.get_compiled_call(generation_config.compile_config)
               if model._valid_auto_compile_criteria(model_kwargs, generation_config) else model.__call__)
    padded = model_kwargs.get("attention_mask") is not None  # generate drops a mask of all ones
    check_every = stop_check_every(input_ids.device)
    outputs = model._prefill(input_ids, generation_config, model_kwargs)
    step = 0
    with model._optimize_model_for_decode(), known_padding() if padded else nullcontext():
        while True:
            if step > 0:
                inputs = model.prepare_inputs_for_generation(
                    input_ids, next_sequence_length=1 if model_kwargs["use_cache"] else None, **model_kwargs)
                outputs = forward(**inputs, return_dict=True)
            model_kwargs = model._update_model_kwargs_for_generation(
                outputs, model_kwargs, is_encoder_decoder=model.config.is_encoder_decoder)
            tokens = _next_tokens(outputs, input_ids, logits_processor, unfinished, pad_token_id)
            del outputs  # as generate: the prefill's (rows, prompt, vocab) logits must not outlive the step
            input_ids = torch.cat([input_ids, tokens[:, None]], dim=-1)  # (rows, prompt + step + 1)
            unfinished = unfinished & ~stopping_criteria(input_ids, None)
            steps_unfinished += unfinished.max()  # 0 or 1, on the device: no read
            step += 1
            if (max_length is not None and input_ids.shape[1] >= max_length) or (
                    step % check_every == 0 and int(unfinished.max()) == 0):
                break
    # one read: generate's loop ran min(steps, steps_unfinished + 1) steps; the rest appended padding to every row
    return input_ids[:, :prompt_length + min(step, int(steps_unfinished) + 1)]

"""Shared-prefix prefill (backends/shared_prefix.py): the prefix common to a batch's prompts runs once and
every row continues from its KV cache. Greedy completions must be exactly those of the plain left-padded
batch, for one model, for population-batched adapters (lora, svd_lora) and for `space: lowrank`, where
the prefix's cache is computed once per member."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import completions_one_at_a_time

from evotune.backends import HFBackend, render_prompt
from evotune.backends.shared_prefix import common_prefix_length, generate_after_prefix, split_prompts
from evotune.spaces.lora import LoRASpace, init_lora_adapter
from evotune.spaces.lowrank import LowRankSpace
from evotune.spaces.svd_lora import SVDLoRASpace
from evotune.strategies import OpenES

MAX_NEW_TOKENS = 8
ARITHMETIC = [[{"role": "user", "content": f"What is {7 * i} + {13 * i}? Reply with only the number."}]
              for i in range(6)]
PROMPT_SETS = {
    "identical": ["Tell me a story about a cat"] * 4,  # the prefix is all but each row's last token
    "no common prefix": ["apple pie", "Zebra crossing here", "1 2 3 4", "why?"],  # the plain path
    "prefixes of different lengths": ["The quick brown fox jumps over the lazy dog and then",
                                      "The quick brown fox jumps over the moon",
                                      "The quick brown fox jumps over the lazy dog and then sleeps all day long",
                                      "The quick brown fox jumps over a fence"],
    "chat template": ARITHMETIC,  # SmolLM2's 21-token system prompt is shared
}


def liven(model: torch.nn.Module, scale: float = 0.3) -> None:
    """Random 2-D weights of std `scale`: the tiny model's default init (std 0.02) gives near-uniform logits,
    whose greedy completions are one repeated token for every prompt, a comparison that cannot fail."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.copy_(torch.randn(param.shape, generator=generator) * scale)


def pair(model_dir: str, dtype: str = "float32") -> tuple[HFBackend, HFBackend]:
    """(shared-prefix backend, plain backend) on one livened model."""
    shared = HFBackend.load(model_dir, dtype=dtype, shared_prefix=True)
    liven(shared.model)
    return shared, HFBackend(shared.model, shared.tokenizer, shared_prefix=False)


def test_common_prefix_leaves_every_row_a_token():
    assert common_prefix_length([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 9]]) == 2
    assert common_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2  # identical rows keep their last token
    assert common_prefix_length([[1, 2], [3, 2]]) == 0


def test_split_layout_gives_each_remainder_its_own_positions():
    rows = [[5, 6, 7, 8, 9, 10], [5, 6, 7, 8, 11], [5, 6, 7, 8, 12, 13, 14]]
    split = split_prompts(rows, pad_token_id=0, device="cpu", minimum=4)
    assert split.prefix.tolist() == [[5, 6, 7, 8]]
    assert split.input_ids.tolist() == [[5, 6, 7, 8, 0, 9, 10], [5, 6, 7, 8, 0, 0, 11], [5, 6, 7, 8, 12, 13, 14]]
    assert split.attention_mask.tolist() == [[1, 1, 1, 1, 0, 1, 1], [1, 1, 1, 1, 0, 0, 1], [1] * 7]
    positions = split.attention_mask.cumsum(-1) - 1  # how transformers numbers positions from the mask
    for row, ids, mask, where in zip(rows, split.input_ids.tolist(), split.attention_mask.tolist(), positions.tolist()):
        kept = [(token, position) for token, keep, position in zip(ids, mask, where) if keep]
        assert kept == [(token, index) for index, token in enumerate(row)]  # each token at its place in its prompt
    assert split_prompts(rows, 0, "cpu", minimum=5) is None  # too short a prefix: the plain batch
    assert split_prompts(rows[:1], 0, "cpu", minimum=1) is None  # one row: nothing to share


def test_first_step_logits_match_the_whole_prompts(tiny_model_dir):
    """The logits after the prefix cache equal those of the padded whole prompts (fp32, up to rounding)."""
    shared, _ = pair(tiny_model_dir)
    tokenizer = shared.tokenizer
    texts = [render_prompt(tokenizer, prompt) for prompt in ARITHMETIC]
    split = split_prompts(tokenizer(texts, add_special_tokens=False)["input_ids"], tokenizer.pad_token_id, "cpu")
    assert split is not None and split.prefix.shape[1] >= 21
    padded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        whole = shared.model(**padded).logits[:, -1]  # (rows, vocab)
        cached = shared.model(input_ids=split.prefix, use_cache=True)
        cache = cached["cache"] if "cache" in cached else cached["past_key_values"]
        cache.batch_repeat_interleave(split.rows)
        length = split.prefix.shape[1]
        positions = (split.attention_mask.cumsum(-1) - 1)[:, length:]
        key = "cache" if "cache" in cached else "past_key_values"
        rest = shared.model(input_ids=split.input_ids[:, length:], attention_mask=split.attention_mask,
                            position_ids=positions, **{key: cache}).logits[:, -1]
    assert torch.allclose(rest, whole, rtol=0, atol=1e-5)
    assert (whole[0] - whole[1]).abs().max() > 1e-2  # prompts differ: the comparison can fail


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", PROMPT_SETS)
def test_generate_is_identical_with_and_without(tiny_model_dir, name, dtype):
    shared, plain = pair(tiny_model_dir, dtype)
    prompts = PROMPT_SETS[name]
    expected = plain.generate(prompts, MAX_NEW_TOKENS)
    assert shared.generate(prompts, MAX_NEW_TOKENS) == expected
    if name != "identical":
        assert len(set(expected)) > 1, "prompts must give different completions"
    for size in (3, 1):  # generate batches of 3 and 1 (one row: no prefix to share)
        shared.generation_batch_size = plain.generation_batch_size = size
        # against the plain path at the same batch size: in bfloat16 a batch's padding can round a near-tie
        # differently on some CPUs' kernels, which is plain generation's behaviour, not the shared prefix's
        assert shared.generate(prompts, MAX_NEW_TOKENS) == plain.generate(prompts, MAX_NEW_TOKENS)


def test_the_prefix_runs_once_per_generate(tiny_model_dir):
    """The prompt pass of generate() sees only the remainders: prefix tokens are not recomputed per row."""
    shared, plain = pair(tiny_model_dir)
    widths: list[tuple[int, int]] = []
    hook = shared.model.model.embed_tokens.register_forward_hook(
        lambda module, args, output: widths.append(tuple(args[0].shape)))
    try:
        shared.generate(ARITHMETIC, 2)
        shared_widths, widths[:] = list(widths), []
        plain.generate(ARITHMETIC, 2)
    finally:
        hook.remove()
    texts = [render_prompt(shared.tokenizer, prompt) for prompt in ARITHMETIC]
    lengths = [len(ids) for ids in shared.tokenizer(texts, add_special_tokens=False)["input_ids"]]
    prefix = common_prefix_length(shared.tokenizer(texts, add_special_tokens=False)["input_ids"])
    assert widths == [(6, max(lengths)), (6, 1)]  # plain: every row's whole prompt, then one decode step
    assert shared_widths == [(1, prefix), (6, max(lengths) - prefix), (6, 1)]


def lora_backends(model_dir: str, kind: str):
    shared = HFBackend.load(model_dir, dtype="float32")  # float32: on by default
    liven(shared.model)
    shared.model = init_lora_adapter(shared.model, rank=8, init="gaussian", seed=3)
    if kind == "lora":
        space = LoRASpace(shared.model)
        candidates = OpenES(population_size=5, sigma=0.5, seed=11).ask()
    else:
        space = SVDLoRASpace(shared.model, alpha=0.5)
        rng = np.random.default_rng(5)
        candidates = [space.mean_vector() + rng.normal(0.0, 0.5, space.dimension) for _ in range(5)]
    return shared, HFBackend(shared.model, shared.tokenizer, shared_prefix=False), space, candidates


def one_at_a_time(space, backend: HFBackend, candidates, prompts) -> list[list[str]]:
    return completions_one_at_a_time(space, backend, candidates, prompts, MAX_NEW_TOKENS)


@pytest.mark.parametrize("kind", ["lora", "svd_lora"])
@pytest.mark.parametrize("name", ["chat template", "prefixes of different lengths"])
def test_population_adapters_identical_with_and_without(tiny_model_dir, kind, name):
    shared, plain, space, candidates = lora_backends(tiny_model_dir, kind)
    assert prefix_used(shared)  # on by default for a float32 PEFT model
    prompts = PROMPT_SETS[name]
    expected = one_at_a_time(space, plain, candidates, prompts)
    assert len({tuple(c) for c in expected}) > 1, "candidates must give different completions"
    assert one_at_a_time(space, shared, candidates, prompts) == expected
    stacked = space.candidate_factors(candidates)
    assert plain.generate_population(prompts, MAX_NEW_TOKENS, space.factors, stacked) == expected
    assert shared.generate_population(prompts, MAX_NEW_TOKENS, space.factors, stacked) == expected
    shared.generation_batch_size = 3
    assert shared.generate_population(prompts, MAX_NEW_TOKENS, space.factors, stacked) == expected


@pytest.mark.parametrize("rank", [1, 4])
def test_lowrank_members_each_get_their_own_prefix(tiny_model_dir, rank):
    shared, plain = pair(tiny_model_dir)
    space = LowRankSpace(shared.model, rank=rank)
    members = OpenES(population_size=6, sigma=0.05, antithetic=True, seed=11).ask()
    expected = one_at_a_time(space, plain, members, ARITHMETIC)
    assert len({tuple(c) for c in expected}) > 2, "members must give different completions"
    stacked = space.candidate_factors(members)
    assert shared.generate_population(ARITHMETIC, MAX_NEW_TOKENS, space.factors, stacked) == expected
    assert plain.generate_population(ARITHMETIC, MAX_NEW_TOKENS, space.factors, stacked) == expected
    shared.generation_batch_size = 4
    assert shared.generate_population(ARITHMETIC, MAX_NEW_TOKENS, space.factors, stacked) == expected


def test_generate_after_prefix_returns_only_new_tokens(tiny_model_dir):
    shared, plain = pair(tiny_model_dir)
    texts = [render_prompt(shared.tokenizer, prompt) for prompt in ARITHMETIC]
    split = split_prompts(shared.tokenizer(texts, add_special_tokens=False)["input_ids"],
                          shared.tokenizer.pad_token_id, "cpu")
    with torch.inference_mode():
        new_tokens = generate_after_prefix(shared.model, split, 2, max_new_tokens=3, do_sample=False,
                                           pad_token_id=shared.tokenizer.pad_token_id)
    assert new_tokens.shape == (2 * len(ARITHMETIC), 3)
    assert torch.equal(new_tokens[:len(ARITHMETIC)], new_tokens[len(ARITHMETIC):])  # two copies of one model


def prefix_used(backend: HFBackend) -> bool:
    return backend._prefix_split(tuple(render_prompt(backend.tokenizer, p) for p in ARITHMETIC)) is not None


@pytest.mark.parametrize(("dtype", "setting", "used"), [("float32", None, True), ("bfloat16", None, False),
                                                        ("float32", False, False), ("bfloat16", True, True)])
def test_config_key_chooses_the_path(tiny_model_dir, dtype, setting, used):
    """Default (null): on where exact (float32), off in bfloat16; true / false force it."""
    from evotune.builders import load_backend
    from evotune.config import TrainConfig

    backend = load_backend(TrainConfig(model=tiny_model_dir, dtype=dtype, shared_prefix=setting), "cpu")
    assert backend.shared_prefix is setting and prefix_used(backend) is used


@pytest.mark.slow
@pytest.mark.parametrize("task", ["arithmetic", "countdown"])
def test_smollm2_identical_with_and_without(task):
    """The real model, float32, 32 prompts of each task: the same greedy completions."""
    from evotune.tasks import get_task

    prompts = [row["prompt"] for row in get_task(task).train_rows[:32]]
    shared = HFBackend.load("smollm2-135m-instruct", dtype="float32")  # on by default in float32
    assert prefix_used(shared)
    plain = HFBackend(shared.model, shared.tokenizer, shared_prefix=False)
    expected = plain.generate(prompts, 24)
    assert len(set(expected)) > 4
    assert shared.generate(prompts, 24) == expected

"""Population-batched evaluation of adapter candidates (one adapter per group of batch rows)
gives the same completions and rewards as applying and generating one candidate at a time."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import POPULATION_ROWS as ROWS
from helpers import assert_identical, broken_reward, completions_one_at_a_time, make_task, snapshot

from evotune.backends import HFBackend
from evotune.backends.multi_lora import population_adapters
from evotune.distributed import BatchedEvaluator, LocalEvaluator
from evotune.errors import ConfigError, RewardFunctionError
from evotune.spaces.lora import LoRASpace, init_lora_adapter
from evotune.spaces.svd_lora import SVDLoRASpace
from evotune.strategies import OpenES

POPULATION = 7  # chunks of 3 leave a remainder of 1
MAX_NEW_TOKENS = 6


def skip_everything(prompts, completions, **columns):
    return [None] * len(completions)


@pytest.fixture
def backend(tiny_model_dir):
    """The tiny fp32 Llama with a rank-8 gaussian-init adapter (B nonzero: the adapter changes outputs)."""
    backend = HFBackend.load(tiny_model_dir, dtype="float32")
    backend.model = init_lora_adapter(backend.model, rank=8, init="gaussian", seed=3)
    return backend


def lora_candidates(space):
    return OpenES(population_size=POPULATION, sigma=0.5, seed=11).ask()  # Candidate(seed, scale)


def svd_candidates(space):
    rng = np.random.default_rng(5)  # CMA-ES style absolute points
    return [space.mean_vector() + rng.normal(0.0, 0.5, space.dimension) for _ in range(POPULATION)]


SPACES = {"lora": (LoRASpace, lora_candidates), "svd": (lambda model: SVDLoRASpace(model, alpha=0.5), svd_candidates)}


def assert_forwards_restored(model) -> None:
    from peft.tuners.lora import LoraLayer

    layers = [module for module in model.modules() if isinstance(module, LoraLayer)]
    assert layers and all("forward" not in module.__dict__ for module in layers)


def sequential_completions(space, backend, candidates) -> list[list[str]]:
    return completions_one_at_a_time(space, backend, candidates, [row["prompt"] for row in ROWS], MAX_NEW_TOKENS)


@pytest.mark.parametrize("kind", SPACES)
def test_candidate_factors_equal_what_apply_writes(backend, kind):
    make_space, make_candidates = SPACES[kind]
    space = make_space(backend.model)
    candidates = make_candidates(space)
    stacked = space.candidate_factors(candidates)
    assert [tuple(s.shape) for s in stacked] == [(POPULATION, *f.weight.shape) for f in space.factors]
    for index, candidate in enumerate(candidates):
        space.apply(candidate)
        for factor, stack in zip(space.factors, stacked):
            assert stack.dtype == factor.weight.dtype and torch.equal(stack[index], factor.weight)
    space.restore()


@pytest.mark.parametrize("kind", SPACES)
def test_batched_forward_matches_each_candidate_alone(backend, kind):
    make_space, make_candidates = SPACES[kind]
    space = make_space(backend.model)
    candidates = make_candidates(space)[:3]
    input_ids = torch.tensor([[1, 17, 230, 4051, 99], [5, 6, 7, 8, 9]])  # (group 2, seq 5)
    with torch.no_grad():
        alone = []
        for candidate in candidates:
            space.apply(candidate)
            alone.append(backend.model(input_ids=input_ids).logits)  # (2, 5, vocab)
        space.restore()
        with population_adapters(backend.model, space.factors, space.candidate_factors(candidates), group_size=2):
            batched = backend.model(input_ids=input_ids.repeat(3, 1)).logits  # (3 * 2, 5, vocab)
    expected = torch.cat(alone)
    assert torch.allclose(batched, expected, rtol=0, atol=1e-5)
    assert (alone[0] - alone[1]).abs().max() > 1e-3  # candidates differ: the comparison can fail
    assert_forwards_restored(backend.model)


@pytest.mark.parametrize("kind", SPACES)
def test_generate_population_matches_one_at_a_time(backend, kind):
    make_space, make_candidates = SPACES[kind]
    space = make_space(backend.model)
    candidates = make_candidates(space)
    expected = sequential_completions(space, backend, candidates)
    assert len({tuple(c) for c in expected}) > 1, "candidates must give different completions"
    prompts = [row["prompt"] for row in ROWS]
    batched = backend.generate_population(prompts, MAX_NEW_TOKENS, space.factors, space.candidate_factors(candidates))
    assert batched == expected
    backend.generation_batch_size = 3  # prompt batches of 3 and 1, each padded on its own as in generate()
    assert backend.generate_population(prompts, MAX_NEW_TOKENS, space.factors,
                                       space.candidate_factors(candidates)) == sequential_completions(space, backend,
                                                                                                      candidates)


@pytest.mark.parametrize("chunk", [1, 3, POPULATION])
@pytest.mark.parametrize("kind", SPACES)
def test_batched_evaluator_equals_local_evaluator(backend, kind, chunk):
    make_space, make_candidates = SPACES[kind]
    space = make_space(backend.model)
    candidates = make_candidates(space)
    prompts = [row["prompt"] for row in ROWS]
    before, mean_generation = snapshot(backend.model), backend.generate(prompts, MAX_NEW_TOKENS)

    expected = LocalEvaluator(space, backend, make_task(), MAX_NEW_TOKENS).evaluate(candidates, ROWS)
    seen: list[int] = []
    rewards = BatchedEvaluator(space, backend, make_task(), MAX_NEW_TOKENS, chunk).evaluate(
        candidates, ROWS, on_candidate=seen.append)
    assert np.array_equal(rewards, expected)
    assert len(set(expected.tolist())) > 1  # different candidates, different rewards: equality can fail
    assert seen == list(range(POPULATION))
    assert_identical(backend.model, before)  # the live adapter is still the mean, bit for bit
    assert_forwards_restored(backend.model)
    assert backend.generate(prompts, MAX_NEW_TOKENS) == mean_generation


def test_skipped_samples_give_nan_like_local(backend):
    space = LoRASpace(backend.model)
    candidates = lora_candidates(space)
    task = make_task(skip_everything)
    rewards = BatchedEvaluator(space, backend, task, MAX_NEW_TOKENS, 3).evaluate(candidates, ROWS)
    assert rewards.shape == (POPULATION,) and np.isnan(rewards).all()
    assert np.array_equal(rewards, LocalEvaluator(space, backend, task, MAX_NEW_TOKENS).evaluate(candidates, ROWS),
                          equal_nan=True)


def test_error_mid_population_restores_adapter_and_forwards(backend):
    space = SVDLoRASpace(backend.model, alpha=0.5)
    space.apply(svd_candidates(space)[0])  # a perturbed adapter left live: evaluation must end at the mean
    space.restore()
    before = snapshot(backend.model)
    space.apply(svd_candidates(space)[1])
    with pytest.raises(RewardFunctionError, match="boom"):
        BatchedEvaluator(space, backend, make_task(broken_reward), MAX_NEW_TOKENS, 3).evaluate(
            svd_candidates(space), ROWS)
    assert_identical(backend.model, before)
    assert_forwards_restored(backend.model)

    stacked = space.candidate_factors(svd_candidates(space)[:2])
    with pytest.raises(RuntimeError, match="population-batched"):  # 2 candidates x 2 rows, but 3 rows sent
        with population_adapters(backend.model, space.factors, stacked, group_size=2), torch.no_grad():
            backend.model(input_ids=torch.tensor([[1, 2], [3, 4], [5, 6]]))
    assert_forwards_restored(backend.model)


def test_refuses_spaces_it_cannot_batch(backend):
    from evotune.spaces.vector import VectorSpace

    with pytest.raises(ConfigError, match="population_batch_size"):
        BatchedEvaluator(VectorSpace(np.zeros(3)), backend, make_task(), MAX_NEW_TOKENS, 4)

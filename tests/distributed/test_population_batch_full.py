"""Population-batched full-rank candidates (`space: full`, `population_batch_size`): several whole perturbed
models in one generate give, in float32, the completions, rewards and final weights of one candidate at a time,
through a resume and against a Ray run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import POPULATION_ROWS as ROWS
from helpers import (
    TINY_EVAL_BUDGET,
    assert_identical,
    completions_one_at_a_time,
    make_task,
    requires_ray,
    snapshot,
    train_until_killed,
)

from evotune.backends import HFBackend
from evotune.backends.stacked_weights import candidate_bytes, candidates_per_generate, population_weights
from evotune.config import TrainConfig
from evotune.distributed import BatchedEvaluator, LocalEvaluator
from evotune.errors import ConfigError
from evotune.spaces import FullParameterSpace
from evotune.strategies import OpenES

POPULATION = 7  # chunks of 3 leave a remainder of 1
MAX_NEW_TOKENS = 6


@pytest.fixture
def backend(tiny_model_dir):
    return HFBackend.load(tiny_model_dir, dtype="float32")


def candidates():
    return OpenES(population_size=POPULATION, sigma=0.05, seed=11).ask()  # Candidate(seed, scale)


def test_stacked_copies_are_the_bits_apply_writes(backend):
    space = FullParameterSpace(backend.model, noise_kind="rademacher")
    members = candidates()[:3]
    stacked = space.candidate_factors(members)
    before = snapshot(backend.model)
    assert_identical(backend.model, before)  # building the stack wrote nothing live
    for index, member in enumerate(members):
        space.apply(member)
        for factor, copies in zip(space.factors, stacked):
            assert torch.equal(copies[index], dict(backend.model.named_parameters())[factor.name]), factor.name
    space.restore()
    assert_identical(backend.model, before)
    # the tied embedding is one parameter: stacked once, patched into the embedding and the LM head both
    assert backend.model.lm_head.weight is backend.model.model.embed_tokens.weight
    assert sum(f.name.endswith("embed_tokens.weight") for f in space.factors) == 1


@pytest.mark.parametrize("batch", [1, 3, POPULATION])
def test_batched_completions_and_rewards_equal_one_at_a_time(backend, batch):
    space = FullParameterSpace(backend.model)
    prompts = [row["prompt"] for row in ROWS]
    reference = completions_one_at_a_time(space, backend, candidates(), prompts, MAX_NEW_TOKENS)
    assert len({tuple(c) for c in reference}) > 1  # the candidates differ: the comparison can fail
    before = snapshot(backend.model)
    task = make_task()
    batched = BatchedEvaluator(space, backend, task, MAX_NEW_TOKENS, batch)
    assert [c for _, c in sorted(batched.completions(candidates(), prompts))] == reference
    rewards = batched.evaluate(candidates(), ROWS)
    np.testing.assert_array_equal(rewards, LocalEvaluator(space, backend, task, MAX_NEW_TOKENS).evaluate(
        candidates(), ROWS))
    assert_identical(backend.model, before)  # the live weights hold the mean throughout


def test_forwards_restored_and_wrong_row_count_refused(backend):
    space = FullParameterSpace(backend.model)
    stacked = space.candidate_factors(candidates()[:2])
    with pytest.raises(RuntimeError, match="population-batched"):  # 2 candidates x 2 rows, but 3 rows sent
        with population_weights(backend.model, space.factors, stacked, group_size=2), torch.no_grad():
            backend.model(input_ids=torch.tensor([[1, 2], [3, 4], [5, 6]]))
    assert not any("forward" in module.__dict__ for module in backend.model.modules())


# --- the run: config, trainer, resume, Ray ---------------------------------------------------------------------


def run_config(model_dir: str, **overrides) -> TrainConfig:
    values = dict(model=model_dir, task="conciseness", space="full", population_size=6, antithetic=True, sigma=0.05,
                  learning_rate=0.05, iterations=4, batch_size=3, max_new_tokens=5, num_eval=3, eval_every=0,
                  checkpoint_every=2, dtype="float32", report_to=[], eval_max_new_tokens=TINY_EVAL_BUDGET)
    values.update(overrides)
    return TrainConfig(**values)


def masters(trainer) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in trainer.space.state_tensors().items()}


def test_config_refuses_what_cannot_batch(tiny_model_dir):
    with pytest.raises(ConfigError, match="backend: hf"):
        run_config(tiny_model_dir, population_batch_size=2, backend="vllm")
    with pytest.raises(ConfigError, match="use one of the two"):
        run_config(tiny_model_dir, population_batch_size=2, prefetch_candidates=True)
    with pytest.raises(ConfigError, match="distributed: ray"):
        run_config(tiny_model_dir, population_batch_size=2, distributed="ray", workers=2)


def test_batched_run_equals_one_at_a_time_and_resumes_exactly(tiny_model_dir, tmp_path, monkeypatch):
    from evotune.trainer import Trainer

    one = Trainer(run_config(tiny_model_dir), tmp_path / "one")
    assert type(one.evaluator) is LocalEvaluator
    one.train()
    expected = masters(one)
    config = run_config(tiny_model_dir, population_batch_size=4)  # chunks of 4 and 2
    killed = Trainer(config, tmp_path / "batched")
    assert isinstance(killed.evaluator, BatchedEvaluator) and killed.evaluator.population_batch_size == 4
    train_until_killed(monkeypatch, killed, 4)  # during iteration 4, after the checkpoint at iteration 2
    resumed = Trainer(config, tmp_path / "batched", resume=True)
    assert resumed.strategy.iteration == 2
    resumed.train()
    for name, tensor in expected.items():
        assert torch.equal(tensor, resumed.space.master[name]), name
    start = Trainer(run_config(tiny_model_dir), tmp_path / "start").space.master
    assert any(not torch.equal(tensor, start[name]) for name, tensor in expected.items())  # training moved it
    one_records = [line for line in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
    batched_records = [line for line in (tmp_path / "batched" / "metrics.jsonl").read_text().splitlines()]
    import json

    def rewards(lines):
        return [json.loads(line).get("reward_mean") for line in lines if "reward_mean" in json.loads(line)]
    assert rewards(one_records) == rewards(batched_records)[-len(rewards(one_records)):]


@pytest.mark.engine  # Ray actors: the engine tier
@requires_ray
def test_ray_replicas_equal_a_batched_run(tiny_model_dir, tmp_path, ray_instance):
    from evotune.trainer import Trainer

    batched = Trainer(run_config(tiny_model_dir, population_batch_size=3), tmp_path / "batched")
    batched_records = [batched.step() for _ in range(2)]
    pooled = Trainer(run_config(tiny_model_dir, distributed="ray", workers=2, checksum_every=1), tmp_path / "ray")
    try:
        pooled_records = [pooled.step() for _ in range(2)]
        for a, b in zip(batched_records, pooled_records):
            assert a["reward_mean"] == b["reward_mean"] and a["reward_max"] == b["reward_max"]
        for name, tensor in masters(batched).items():
            assert torch.equal(tensor, pooled.space.master[name]), name
        pooled.evaluator.check_replicas()
    finally:
        pooled.evaluator.close()


# --- population_batch_size: auto ---------------------------------------------------------------------------------

GIB = 2 ** 30


@pytest.mark.parametrize("free, each, population, expected", [
    (10 * GIB, GIB, 30, 8),  # 8 fit in 80% of 10 GiB: 4 generates of 8, 8, 8, 6 -> 8
    (17 * GIB, GIB, 30, 10),  # 13 fit: 3 generates, spread evenly as 10 + 10 + 10, not 13 + 13 + 4
    (100 * GIB, GIB, 30, 30),  # all fit: the whole population in one generate
    (2 * GIB, GIB, 30, 1),  # one fits (1.6 GiB): one at a time, the unbatched path
    (GIB // 2, GIB, 30, 1),  # none fits: still one at a time
    (10 * GIB, GIB, 1, 1),
])
def test_auto_size_from_free_memory(free, each, population, expected):
    assert candidates_per_generate(free, each, population) == expected


def test_auto_size_refuses_sizes_that_are_not(backend):
    with pytest.raises(ValueError, match="must be positive"):
        candidates_per_generate(GIB, 0, 30)
    space = FullParameterSpace(backend.model)
    weights = sum(tensor.numel() * 4 for _, tensor in space.parameters)  # float32 copies
    config = backend.model.config  # 2 layers, K/V heads of head_dim, float32 cache and logits
    cache = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * 4
    assert candidate_bytes(backend.model, space.parameters, rows=3, tokens=10) == (
        weights + 3 * (10 * cache + config.vocab_size * 4))


def test_auto_in_a_run_one_at_a_time_on_cpu_and_sized_from_free_memory(tiny_model_dir, monkeypatch):
    from evotune.backends import stacked_weights
    from evotune.builders import build_evaluator, build_space, build_task
    from evotune.distributed.base import Replica

    config = run_config(tiny_model_dir, population_batch_size="auto")
    backend = HFBackend.load(tiny_model_dir, dtype="float32")
    replica = Replica(build_task(config), backend, build_space(config, backend), config.max_new_tokens)
    assert type(build_evaluator(config, replica)) is LocalEvaluator  # a CPU: one at a time
    each = candidate_bytes(backend.model, replica.space.parameters, config.batch_size,
                           stacked_weights.PROMPT_TOKENS + config.max_new_tokens)
    monkeypatch.setattr(stacked_weights, "free_device_bytes", lambda device: 5 * each)  # as a GPU would say: 4 fit
    evaluator = build_evaluator(config, replica)
    assert isinstance(evaluator, BatchedEvaluator) and evaluator.population_batch_size == 3  # 6 as 3 + 3


@pytest.mark.parametrize("overrides, batched", [
    ({}, True),  # unset: auto, sized from the free memory on a GPU
    ({"population_batch_size": 1}, False),
    ({"compile_generation": True}, False),  # speeds the one-at-a-time loop instead
    ({"prefetch_candidates": True}, False),
])
def test_full_candidates_are_batched_by_default_where_a_gpu_has_room(tiny_model_dir, monkeypatch, overrides, batched):
    from evotune.backends import stacked_weights
    from evotune.builders import build_evaluator, build_space, build_task
    from evotune.distributed.base import Replica

    config = run_config(tiny_model_dir, **overrides)
    backend = HFBackend.load(tiny_model_dir, dtype="float32")
    replica = Replica(build_task(config), backend, build_space(config, backend), config.max_new_tokens)
    assert type(build_evaluator(config, replica)) is LocalEvaluator  # a CPU: one at a time, whatever the setting
    monkeypatch.setattr(stacked_weights, "free_device_bytes", lambda device: 2**40)  # as a roomy GPU would say
    evaluator = build_evaluator(config, replica)
    assert isinstance(evaluator, BatchedEvaluator) is batched
    if batched:
        assert evaluator.population_batch_size == config.population_size


@pytest.mark.parametrize("value, overrides, message", [
    ("auto", {"space": "lora"}, "space: full"),
    ("four", {}, "whole number"),
    (True, {}, "whole number"),
    (0, {}, "positive number"),
    ("auto", {"backend": "vllm"}, "backend: hf"),
])
def test_population_batch_size_values(tiny_model_dir, value, overrides, message):
    with pytest.raises(ConfigError, match=message):
        run_config(tiny_model_dir, population_batch_size=value, **overrides)
    assert run_config(tiny_model_dir, population_batch_size="auto").population_batch_size == "auto"


# --- memory faults: the allocator's exception injected on CPU --------------------------------------------------


def failing_above(backend, limit: int, error: type[BaseException] = torch.OutOfMemoryError) -> list[int]:
    """Make `backend.generate_population` raise the allocator's exception for more than `limit` candidates at once,
    as CUDA (or the CPU allocator) would; returns the list of candidate counts it was called with."""
    real, calls = backend.generate_population, []

    def generate_population(prompts, max_new_tokens, factors, stacked):
        calls.append(int(stacked[0].shape[0]))
        if calls[-1] > limit:
            raise error("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.1 GiB total capacity)")
        return real(prompts, max_new_tokens, factors, stacked)

    backend.generate_population = generate_population
    return calls


def test_out_of_memory_halves_the_batch_and_ends_on_the_same_weights(tiny_model_dir, tmp_path, capsys):
    from evotune.trainer import Trainer

    one = Trainer(run_config(tiny_model_dir), tmp_path / "one")
    one.train()
    batched = Trainer(run_config(tiny_model_dir, population_batch_size=4), tmp_path / "batched")
    calls = failing_above(batched.backend, limit=1)
    batched.train()
    assert calls[:3] == [4, 2, 1] and set(calls[3:]) == {1}  # halved once per failure, then kept at 1
    assert batched.evaluator.population_batch_size == 1
    assert "4 candidates per generate ran out of memory (CUDA out of memory. Tried to allocate 2.00 GiB" in (
        capsys.readouterr().err)
    expected, got = masters(one), masters(batched)
    assert expected.keys() == got.keys() and all(torch.equal(expected[name], got[name]) for name in expected)


def test_cpu_allocator_failure_counts_as_out_of_memory_and_one_candidate_that_fails_stops_the_run(backend):
    from evotune.errors import OutOfMemoryError

    space = FullParameterSpace(backend.model)
    evaluator = BatchedEvaluator(space, backend, make_task(), MAX_NEW_TOKENS, 2)
    failing_above(backend, limit=0, error=lambda text: RuntimeError(
        "DefaultCPUAllocator: can't allocate memory: you tried to allocate 17179869184 bytes."))
    with pytest.raises(OutOfMemoryError, match=r"one candidate ran out of memory \(DefaultCPUAllocator: can't "
                                               r"allocate memory: you tried to allocate 17179869184 bytes.\).*"
                                               r"Lower `batch_size`"):
        list(evaluator.completions(candidates(), [row["prompt"] for row in ROWS]))
    other = BatchedEvaluator(space, backend, make_task(), MAX_NEW_TOKENS, 2)
    backend.generate_population = lambda *args: (_ for _ in ()).throw(ValueError("not memory"))
    with pytest.raises(ValueError, match="not memory"):  # other errors are not retried
        list(other.completions(candidates(), [row["prompt"] for row in ROWS]))

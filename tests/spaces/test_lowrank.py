"""space: lowrank (EGGROLL, arXiv 2511.16652): rank-r members of a full-parameter mean.

The batched forward (every member's low-rank delta on its own rows) against the dense oracle
(apply(): W + sigma E_i written into the weights, one member at a time); the update against the
dense sum of perturbations; sigma 0; resume; Ray."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import (
    TINY_EVAL_BUDGET,
    assert_identical,
    broken_reward,
    completions_one_at_a_time,
    fingerprint_reward,
    requires_ray,
    snapshot,
    train_until_killed,
)
from helpers import make_task as make_population_task

from evotune.backends import HFBackend
from evotune.backends.multi_lora import population_linear_deltas
from evotune.config import TrainConfig
from evotune.distributed import BatchedEvaluator, LocalEvaluator
from evotune.errors import ConfigError, RewardFunctionError
from evotune.optimizers import SGD, Adam
from evotune.spaces import SPACES, LowRankSpace
from evotune.strategies import OpenES
from evotune.tasks import Task
from evotune.types import Candidate, SeedUpdate

POPULATION = 6  # antithetic: 3 seeds; chunks of 4 leave a remainder of 2
MAX_NEW_TOKENS = 6
SIGMA = 0.05
ROWS = [{"prompt": "What is 12 + 30?"},
        {"prompt": [{"role": "user", "content": "Say hello in one word."}]},  # chat template: longer, padded
        {"prompt": "7"}]


def make_task(reward_fn=fingerprint_reward) -> Task:
    return make_population_task(reward_fn, ROWS)


@pytest.fixture
def backend(tiny_model_dir):
    return HFBackend.load(tiny_model_dir, dtype="float32")


def candidates(sigma: float = SIGMA, seed: int = 11) -> list[Candidate]:
    return OpenES(population_size=POPULATION, sigma=sigma, antithetic=True, seed=seed).ask()


def assert_forwards_restored(model) -> None:
    assert all("forward" not in module.__dict__ for module in model.modules())


def one_at_a_time(space, backend, members) -> list[list[str]]:
    return completions_one_at_a_time(space, backend, members, [row["prompt"] for row in ROWS], MAX_NEW_TOKENS)


def test_registered_and_selects_linear_weights_only(backend):
    assert SPACES["lowrank"] is LowRankSpace
    space = LowRankSpace(backend.model, rank=2)
    names = [name for name, _ in space.parameters]
    assert len(names) == 14 and all(name.endswith("_proj.weight") for name in names)  # 2 layers x q,k,v,o,gate,up,down
    assert not any("embed" in name or "norm" in name or "lm_head" in name for name in names)  # tied head: the embedding
    assert [(f.factor, f.shape) for f in space.factors[:2]] == [("A", (2, 16)), ("B", (16, 2))]  # q_proj: 16 -> 16
    only_mlp = LowRankSpace(backend.model, include=[r"mlp"], exclude=[r"down_proj"])
    assert [name.split(".")[-2] for name, _ in only_mlp.parameters] == ["gate_proj", "up_proj"] * 2
    with pytest.raises(ConfigError, match="selects no parameter"):
        LowRankSpace(backend.model, include=["embed_tokens"])
    with pytest.raises(ConfigError, match="perturbation_rank"):
        LowRankSpace(backend.model, rank=0)


@pytest.mark.parametrize("kind", ["gaussian", "rademacher"])
@pytest.mark.parametrize("rank", [1, 3])
def test_apply_writes_master_plus_rank_r_noise_and_factors_match(backend, kind, rank):
    space = LowRankSpace(backend.model, rank=rank, noise_kind=kind)
    members = candidates()
    stacked = space.candidate_factors(members)
    assert [tuple(s.shape) for s in stacked] == [(POPULATION, *f.shape) for f in space.factors]
    weights = dict(backend.model.named_parameters())
    for index, member in enumerate(members):
        space.apply(member)
        for position, (_module, name) in enumerate(space.modules):
            a, b = space.factor_noise(member.seed, name)
            assert a.shape == (space.master[name].shape[0], rank) and b.shape == (space.master[name].shape[1], rank)
            dense = space.perturbation(member, name)
            assert torch.linalg.matrix_rank(dense) == rank
            alpha = member.scale / math.sqrt(rank)
            # mean + scale A B^T / sqrt(r), the product scaled, then added (a fused addmm rounds a tensor-parallel
            # slice differently from the whole: spaces/lowrank.py)
            assert torch.equal(weights[name], torch.mm(a, b.T).mul_(alpha).add_(space.master[name]))
            # the batched factors carry the same perturbation: B_c @ A_c in LoRA's layout
            lora_a, lora_b = stacked[2 * position][index], stacked[2 * position + 1][index]
            assert torch.allclose(lora_b @ lora_a, dense, rtol=0, atol=1e-6)
    # antithetic pairs share the factors with opposite signs
    for position in range(0, len(stacked), 2):
        assert torch.equal(stacked[position][0], -stacked[position][1])
        assert torch.equal(stacked[position + 1][0], stacked[position + 1][1])
    space.restore()


def test_noise_scale_matches_full_space(backend):
    """E = A B^T / sqrt(r) has unit-variance entries for any r, so sigma means what it means for space: full."""
    for rank in (1, 4, 16):
        space = LowRankSpace(backend.model, rank=rank, include=[r"layers\.0\.mlp\.up_proj"])
        values = torch.cat([space.perturbation(Candidate(seed, 1.0), space.parameters[0][0]).view(-1)
                            for seed in range(40)])
        assert abs(values.var().item() - 1.0) < 0.1, rank


def test_batched_forward_matches_each_member_alone(backend):
    space = LowRankSpace(backend.model, rank=2)
    members = candidates()[:3]
    input_ids = torch.tensor([[1, 17, 230, 4051, 99], [5, 6, 7, 8, 9]])  # (group 2, seq 5)
    with torch.no_grad():
        alone = []
        for member in members:
            space.apply(member)
            alone.append(backend.model(input_ids=input_ids).logits)  # (2, 5, vocab)
        space.restore()
        before = snapshot(backend.model)
        with population_linear_deltas(backend.model, space.factors, space.candidate_factors(members), group_size=2):
            batched = backend.model(input_ids=input_ids.repeat(3, 1)).logits  # (3 * 2, 5, vocab)
    assert torch.allclose(batched, torch.cat(alone), rtol=0, atol=1e-5)
    assert (alone[0] - alone[1]).abs().max() > 1e-3  # members differ: the comparison can fail
    assert_identical(backend.model, before)
    assert_forwards_restored(backend.model)


@pytest.mark.parametrize("rank", [1, 4])
def test_batched_generation_equals_dense_one_at_a_time(backend, rank):
    """fp32, greedy: exactly the completions of writing W + sigma E_i and generating member by member."""
    space = LowRankSpace(backend.model, rank=rank)
    members = candidates()
    expected = one_at_a_time(space, backend, members)
    assert len({tuple(c) for c in expected}) > 2, "members must give different completions"
    prompts = [row["prompt"] for row in ROWS]
    assert backend.generate_population(prompts, MAX_NEW_TOKENS, space.factors,
                                       space.candidate_factors(members)) == expected
    backend.generation_batch_size = 2  # prompt batches of 2 and 1, each padded on its own as in generate()
    assert backend.generate_population(prompts, MAX_NEW_TOKENS, space.factors,
                                       space.candidate_factors(members)) == one_at_a_time(space, backend, members)


@pytest.mark.parametrize("chunk", [1, 4, POPULATION])
def test_batched_evaluator_equals_local_evaluator(backend, chunk):
    space = LowRankSpace(backend.model, rank=2)
    members = candidates()
    prompts = [row["prompt"] for row in ROWS]
    before, mean_generation = snapshot(backend.model), backend.generate(prompts, MAX_NEW_TOKENS)
    expected = LocalEvaluator(space, backend, make_task(), MAX_NEW_TOKENS).evaluate(members, ROWS)
    seen: list[int] = []
    rewards = BatchedEvaluator(space, backend, make_task(), MAX_NEW_TOKENS, chunk).evaluate(
        members, ROWS, on_candidate=seen.append)
    assert np.array_equal(rewards, expected) and len(set(expected.tolist())) > 1
    assert seen == list(range(POPULATION))
    assert_identical(backend.model, before)
    assert_forwards_restored(backend.model)
    assert backend.generate(prompts, MAX_NEW_TOKENS) == mean_generation


def test_error_mid_population_restores_weights_and_forwards(backend):
    space = LowRankSpace(backend.model)
    before = snapshot(backend.model)
    space.apply(candidates()[0])  # a perturbed model left live: evaluation must end at the mean
    with pytest.raises(RewardFunctionError, match="boom"):
        BatchedEvaluator(space, backend, make_task(broken_reward), MAX_NEW_TOKENS, 4).evaluate(candidates(), ROWS)
    assert_identical(backend.model, before)
    assert_forwards_restored(backend.model)
    with pytest.raises(RuntimeError, match="population-batched"):  # 2 members x 2 rows, but 3 rows sent
        with population_linear_deltas(backend.model, space.factors, space.candidate_factors(candidates()[:2]),
                                      group_size=2), torch.no_grad():
            backend.model(input_ids=torch.tensor([[1, 2], [3, 4], [5, 6]]))
    assert_forwards_restored(backend.model)


def test_sigma_zero_changes_nothing(backend):
    space = LowRankSpace(backend.model, rank=2)
    before = snapshot(backend.model)
    prompts = [row["prompt"] for row in ROWS]
    mean_generation = backend.generate(prompts, MAX_NEW_TOKENS)
    zero = [Candidate(member.seed, 0.0) for member in candidates()]
    space.apply(zero[0])
    assert_identical(backend.model, before)
    assert backend.generate_population(prompts, MAX_NEW_TOKENS, space.factors,
                                       space.candidate_factors(zero)) == [mean_generation] * POPULATION
    space.optimizer = SGD(learning_rate=0.0)
    space.apply_update(SeedUpdate(0, [1, 2, 3], [0.5, -0.25, 1.0]))  # learning rate 0
    space.optimizer = SGD(learning_rate=1.0)
    space.apply_update(SeedUpdate(1, [1, 2], [0.0, 0.0]))  # all coefficients 0
    assert_identical(backend.model, before)


@pytest.mark.parametrize("rank", [1, 3])
def test_update_equals_the_dense_sum(backend, rank):
    space = LowRankSpace(backend.model, rank=rank, optimizer=SGD(learning_rate=0.7))
    seeds, coefficients = [5, 6, 7, 8], [0.3, -0.1, 0.0, 0.45]
    expected = {name: master + 0.7 * sum(space.perturbation(Candidate(seed, c), name)
                                         for seed, c in zip(seeds, coefficients))
                for name, master in space.master.items()}
    untouched = {name: param.detach().clone() for name, param in backend.model.named_parameters()
                 if name not in space.master}
    space.apply_update(SeedUpdate(0, seeds, coefficients))
    weights = dict(backend.model.named_parameters())
    for name, tensor in expected.items():
        assert torch.allclose(space.master[name], tensor, rtol=0, atol=1e-6), name
        assert torch.equal(weights[name], space.master[name])
    for name, tensor in untouched.items():  # embeddings, norms: fixed
        assert torch.equal(weights[name], tensor), name


def test_update_accumulates_in_fp32_into_a_bf16_model(tiny_model_dir):
    backend = HFBackend.load(tiny_model_dir, dtype="bfloat16")
    space = LowRankSpace(backend.model, optimizer=SGD(learning_rate=1e-6))
    name, param = space.parameters[0]
    start = space.master[name].clone()
    for iteration in range(50):  # each step is far below bf16's resolution of the weights
        space.apply_update(SeedUpdate(iteration, [1], [1.0]))
    drift = space.master[name] - start
    assert torch.allclose(drift, 50e-6 * space.perturbation(Candidate(1, 1.0), name), rtol=1e-2, atol=3e-7)
    assert torch.equal(param, space.master[name].to(torch.bfloat16))


def test_exact_restore_after_many_cycles_in_bf16(tiny_model_dir):
    backend = HFBackend.load(tiny_model_dir, dtype="bfloat16")
    space = LowRankSpace(backend.model, rank=2)
    before = snapshot(backend.model)
    for member in candidates(sigma=1e-3) * 10:
        space.apply(member)
    space.restore()
    assert_identical(backend.model, before)


def test_update_is_the_same_with_any_thread_count(tiny_model_dir):
    """Replicas with different torch thread counts (Ray actors vs the driver) reach the same mean."""
    threads = torch.get_num_threads()
    sums = set()
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            space = LowRankSpace(HFBackend.load(tiny_model_dir, dtype="float32").model, rank=4, optimizer=Adam(1e-2))
            for i in range(3):
                space.apply_update(SeedUpdate(i, list(range(40)), [0.01 * (k - 20) for k in range(40)]))
            sums.add(space.checksum())
    finally:
        torch.set_num_threads(threads)
    assert len(sums) == 1


def test_refuses_vector_members(backend):
    space = LowRankSpace(backend.model)
    with pytest.raises(ConfigError, match="openes"):
        space.apply(np.zeros(3))


# --- the run: config, trainer, resume, Ray ---------------------------------------------------------------------


def run_config(model_dir: str, **overrides) -> TrainConfig:
    values = dict(model=model_dir, task="conciseness", space="lowrank", perturbation_rank=2, population_size=6,
                  antithetic=True, sigma=0.05, learning_rate=0.05, iterations=4, batch_size=3, max_new_tokens=5,
                  num_eval=3, eval_every=0, checkpoint_every=2, dtype="float32", report_to=[],
                  eval_max_new_tokens=TINY_EVAL_BUDGET)
    values.update(overrides)
    return TrainConfig(**values)


def masters(trainer) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in trainer.space.state_tensors().items()}


def test_config_and_builders(tiny_model_dir, tmp_path):
    from evotune.trainer import Trainer

    trainer = Trainer(run_config(tiny_model_dir), tmp_path / "batched")
    assert isinstance(trainer.space, LowRankSpace) and trainer.space.rank == 2
    assert isinstance(trainer.evaluator, BatchedEvaluator) and trainer.evaluator.population_batch_size == 6
    one = Trainer(run_config(tiny_model_dir, population_batch_size=1), tmp_path / "one")
    assert type(one.evaluator) is LocalEvaluator  # the dense path, member by member
    # the batched and the one-at-a-time run take the same steps (fp32: the same completions)
    records = [trainer.step() for _ in range(2)], [one.step() for _ in range(2)]
    assert [r["reward_mean"] for r in records[0]] == [r["reward_mean"] for r in records[1]]
    for name, tensor in masters(trainer).items():
        assert torch.equal(tensor, one.space.master[name]), name
    with pytest.raises(ConfigError, match="perturbation_rank"):
        run_config(tiny_model_dir, perturbation_rank=0)
    with pytest.raises(ConfigError, match="openes"):
        run_config(tiny_model_dir, strategy="cma")
    with pytest.raises(ConfigError, match="adapter"):
        run_config(tiny_model_dir, adapter=str(tmp_path))
    with pytest.raises(ConfigError, match="optimizer: sgd"):  # on vLLM the engine's weights hold the mean
        run_config(tiny_model_dir, backend="vllm", optimizer="adam")
    run_config(tiny_model_dir, backend="vllm")


def test_resume_is_exact(tiny_model_dir, tmp_path, monkeypatch):
    from evotune.trainer import Trainer

    config = run_config(tiny_model_dir, optimizer="adam")
    uninterrupted = Trainer(config, tmp_path / "a")
    uninterrupted.train()
    expected = masters(uninterrupted)

    killed = Trainer(config, tmp_path / "b")
    train_until_killed(monkeypatch, killed, 4)  # during iteration 4, after the checkpoint at iteration 2
    resumed = Trainer(config, tmp_path / "b", resume=True)
    assert resumed.strategy.iteration == 2
    resumed.train()
    for name, tensor in expected.items():
        assert torch.equal(tensor, resumed.space.master[name]), name
    assert any(not torch.equal(tensor, Trainer(config, tmp_path / "c").space.master[name])
               for name, tensor in expected.items())  # training moved the mean: the comparison can fail
    from transformers import AutoModelForCausalLM

    final = dict(AutoModelForCausalLM.from_pretrained(tmp_path / "a" / "final").named_parameters())
    for name, tensor in expected.items():  # final/ is a plain model holding the trained mean
        assert torch.equal(final[name], tensor), name


@requires_ray
@pytest.mark.slow  # Ray replicas of a space: distributed/test_ray.py in CI
def test_two_ray_actors_equal_one_process(tiny_model_dir, tmp_path, ray_instance):
    from evotune.trainer import Trainer

    local = Trainer(run_config(tiny_model_dir), tmp_path / "local")
    local_records = [local.step() for _ in range(2)]
    pooled = Trainer(run_config(tiny_model_dir, distributed="ray", workers=2, checksum_every=1), tmp_path / "ray")
    try:
        pooled_records = [pooled.step() for _ in range(2)]
        for a, b in zip(local_records, pooled_records):
            assert a["reward_mean"] == b["reward_mean"] and a["reward_max"] == b["reward_max"]
        for name, tensor in masters(local).items():
            assert torch.equal(tensor, pooled.space.master[name]), name
        pooled.evaluator.check_replicas()  # every actor holds the driver's mean, bit for bit
    finally:
        pooled.evaluator.close()

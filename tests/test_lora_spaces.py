"""LoRA and SVD-LoRA (ESSA) space contracts on a tiny random Llama with a PEFT adapter."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from evotune.backends import HFBackend
from evotune.errors import ConfigError
from evotune.spaces import noise
from evotune.spaces.lora import LoRASpace, init_lora_adapter, lora_factors
from evotune.spaces.svd_lora import SVDLoRASpace
from evotune.strategies import CMAES, SGD, Candidate, OpenES, SeedUpdate

RANK = 8
NUM_MODULES = 8  # 2 layers x q, k, v, o
SPACES = {"lora": LoRASpace, "svd": SVDLoRASpace, "svd-half": lambda model: SVDLoRASpace(model, alpha=0.5)}


def make_model(model_dir: str, random_b: bool = True, seed: int = 0):
    """The tiny Llama (fp32) with a rank-8 adapter; B random (seeded) unless PEFT's zero B is wanted."""
    model = init_lora_adapter(HFBackend.load(model_dir, dtype="float32").model, rank=RANK, seed=seed)
    if random_b:
        generator = torch.Generator().manual_seed(1000 + seed)
        with torch.no_grad():
            for factor in lora_factors(model):
                if factor.factor == "B":
                    factor.weight.copy_(torch.randn(factor.weight.shape, generator=generator) * 0.3)
    return model


@pytest.fixture
def model(tiny_model_dir):
    return make_model(tiny_model_dir)


def snapshot(model) -> dict[str, torch.Tensor]:
    return {name: param.detach().clone() for name, param in model.named_parameters()}


def assert_identical(model, reference, only=None):
    for name, param in model.named_parameters():
        if only is None or only(name):
            assert torch.equal(param, reference[name]), name


def is_lora(name: str) -> bool:
    return "lora_" in name


INPUT_IDS = torch.tensor([[1, 17, 230, 4051, 99, 12]])


@torch.no_grad()
def logits(model) -> torch.Tensor:
    return model(input_ids=INPUT_IDS).logits  # (1, seq, vocab)


def score(model) -> float:
    return float(logits(model)[0, -1, 42])


# --- init_lora_adapter ---------------------------------------------------------------------------

def test_init_lora_adapter_is_seeded_peft_default_and_keeps_the_global_rng(tiny_model_dir):
    state = torch.random.get_rng_state()
    first, again = make_model(tiny_model_dir, random_b=False), make_model(tiny_model_dir, random_b=False)
    other = make_model(tiny_model_dir, random_b=False, seed=1)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert not first.training
    for a, b, c in zip(lora_factors(first), lora_factors(again), lora_factors(other)):
        assert torch.equal(a.weight, b.weight)
        if a.factor == "A":  # Kaiming-uniform(a=sqrt(5)): bound 1/sqrt(fan_in)
            assert not torch.equal(a.weight, c.weight)
            assert a.weight.abs().max() <= 1 / a.weight.shape[1] ** 0.5 and a.weight.abs().max() > 0
        else:
            assert not a.weight.any()  # PEFT's zero B: the adapter starts as a no-op
    with pytest.raises(ConfigError, match="init"):
        init_lora_adapter(HFBackend.load(tiny_model_dir, dtype="float32").model, init="orthogonal")


# --- contracts shared by both spaces -------------------------------------------------------------

@pytest.mark.parametrize("kind", SPACES)
def test_same_candidate_gives_the_same_weights(model, kind):
    space = SPACES[kind](model)
    space.apply(Candidate(seed=5, scale=0.1))
    first = snapshot(model)
    space.apply(Candidate(seed=6, scale=0.1))
    assert all(not torch.equal(param, first[name]) for name, param in model.named_parameters() if is_lora(name))
    space.restore()
    space.apply(Candidate(seed=5, scale=0.1))
    assert_identical(model, first)


def test_lora_noise_is_named_per_module_and_factor(model):
    space = LoRASpace(model)
    mean = {f.state_key: f.weight.detach().clone() for f in space.factors}
    space.apply(Candidate(seed=5, scale=0.1))
    for factor in space.factors:
        eps = noise(factor.weight.shape, 5, f"lora/{factor.module}/{factor.factor}")
        assert torch.equal(factor.weight, mean[factor.state_key] + 0.1 * eps), factor.state_key


def test_svd_noise_moves_the_top_singular_values(model):
    space = SVDLoRASpace(model, alpha=0.5)
    space.apply(Candidate(seed=5, scale=0.1))
    for factor, svd in zip(space.factors, space.svds):
        eps = noise((4,), 5, f"svd/{factor.module}/{factor.factor}").double()
        expected = svd.u @ torch.diag(svd.s + torch.cat([0.1 * eps, torch.zeros(4, dtype=torch.float64)])) @ svd.vh
        assert torch.allclose(factor.weight.double(), expected, atol=1e-6)


@pytest.mark.parametrize("kind", SPACES)
def test_exact_restore_after_50_cycles(model, kind):
    space = SPACES[kind](model)
    before = snapshot(model)
    rng = np.random.default_rng(0)
    for member in range(50):
        if member % 5 == 4:  # CMA-ES points too
            space.apply(space.mean_vector() + rng.normal(0.0, 0.2, space.dimension))
        else:
            space.apply(Candidate(seed=member, scale=(-1) ** member * 0.2))
        if member % 7 == 0:
            space.restore()
    space.restore()
    assert_identical(model, before)


@pytest.mark.parametrize("kind", SPACES)
def test_scale_zero_apply_is_a_no_op(model, kind):
    space = SPACES[kind](model)
    before = snapshot(model)
    space.apply(Candidate(seed=3, scale=0.0))
    assert_identical(model, before)


@pytest.mark.parametrize("kind", SPACES)
def test_learning_rate_zero_update_is_a_no_op(model, kind):
    space = SPACES[kind](model)
    before, mean = snapshot(model), space.mean_vector()
    space.optimizer = SGD(learning_rate=0.0)
    space.apply_update(SeedUpdate(0, [1, 2, 3], [0.5, -0.2, 0.1]))
    assert_identical(model, before)
    assert np.array_equal(space.mean_vector(), mean)


@pytest.mark.parametrize("kind", SPACES)
def test_base_weights_never_change(model, kind):
    before = snapshot(model)
    space = SPACES[kind](model)
    space.apply(Candidate(seed=1, scale=0.5))
    space.optimizer = SGD(learning_rate=0.1)
    space.apply_update(SeedUpdate(0, [1, 2], [0.5, -0.5]))
    space.apply(space.mean_vector() + 0.3)
    space.set_mean(space.mean_vector() - 0.1)
    space.load_state_tensors(space.state_tensors())
    changed = {name for name, param in model.named_parameters() if not torch.equal(param, before[name])}
    assert changed and all(is_lora(name) for name in changed), changed


@pytest.mark.parametrize("kind", SPACES)
def test_cma_vector_apply_then_set_mean_round_trip(model, kind):
    space = SPACES[kind](model)
    point = space.mean_vector() + np.random.default_rng(1).normal(0.0, 0.1, space.dimension)
    space.apply(point)
    applied = snapshot(model)
    space.restore()
    space.set_mean(point)
    assert_identical(model, applied)
    assert np.array_equal(space.mean_vector(), point.astype(np.float32).astype(np.float64))
    space.apply(Candidate(seed=2, scale=0.3))
    space.restore()
    assert_identical(model, applied)


@pytest.mark.parametrize("kind", SPACES)
def test_state_tensors_round_trip_onto_another_start(tiny_model_dir, model, kind):
    space = SPACES[kind](model)
    space.optimizer = SGD(learning_rate=0.05)
    space.apply_update(SeedUpdate(0, [11, 12], [0.3, -0.1]))
    state = {key: value.clone() for key, value in space.state_tensors().items()}
    trained = space.adapter_weights()
    other = make_model(tiny_model_dir, seed=7)  # another adapter init: the checkpoint alone decides
    resumed = SPACES[kind](other)
    resumed.load_state_tensors(state)
    assert np.array_equal(resumed.mean_vector(), space.mean_vector())
    assert all(torch.equal(trained[key], value) for key, value in resumed.adapter_weights().items())
    with pytest.raises(ConfigError):
        resumed.load_state_tensors({"vector": torch.zeros(3)})


def test_dimension_formula(model):
    lora = LoRASpace(model)
    assert lora.dimension == sum(p.numel() for name, p in model.named_parameters() if is_lora(name))
    assert SVDLoRASpace(model, alpha=1.0).dimension == NUM_MODULES * RANK * 2
    half = SVDLoRASpace(model, alpha=0.5)
    assert half.k == 4 and half.dimension == NUM_MODULES * 4 * 2


def test_alpha_rounding_and_validation(model):
    assert SVDLoRASpace(model, alpha=0.125).k == 1  # the smallest alpha that works at r = 8
    assert SVDLoRASpace(model, alpha=0.3).k == 2  # floor(2.4)
    with pytest.raises(ConfigError, match=r"alpha=0\.1 .*rank 8.*0\.125"):
        SVDLoRASpace(model, alpha=0.1)
    for alpha in (0.0, -0.5, 1.5):
        with pytest.raises(ConfigError, match=r"\(0, 1\]"):
            SVDLoRASpace(model, alpha=alpha)


# --- SVD-specific --------------------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_zero_offset_reproduces_the_adapter(model, alpha):
    original, original_logits = snapshot(model), logits(model)
    space = SVDLoRASpace(model, alpha=alpha)
    for name, param in model.named_parameters():
        if is_lora(name):
            relative = (param - original[name]).norm() / original[name].norm()
            assert relative <= 1e-6, (name, float(relative))
            assert torch.allclose(param, original[name], rtol=1e-6, atol=1e-7), name
    assert torch.allclose(logits(model), original_logits, rtol=0, atol=1e-5)
    assert np.array_equal(space.mean_vector(), np.zeros(space.dimension))


def test_zero_b_offsets_still_move_the_model(tiny_model_dir):
    model = make_model(tiny_model_dir, random_b=False)
    with model.disable_adapter():
        base_logits = logits(model)
    assert torch.equal(logits(model), base_logits)  # B = 0: the adapter is a no-op
    space = SVDLoRASpace(model)
    assert space.dimension == NUM_MODULES * RANK * 2
    assert all(not svd.s.any() for f, svd in zip(space.factors, space.svds) if f.factor == "B")
    space.apply(Candidate(seed=1, scale=0.5))
    assert any(f.weight.any() for f in space.factors if f.factor == "B")
    assert not torch.allclose(logits(model), base_logits, atol=1e-4)
    space.restore()
    assert all(not f.weight.any() for f in space.factors if f.factor == "B")
    assert torch.equal(logits(model), base_logits)


def test_adapter_weights_are_keyed_like_peft(model):
    from peft import get_peft_model_state_dict

    space = SVDLoRASpace(model, alpha=0.5)
    space.apply(Candidate(seed=4, scale=0.2))
    weights, reference = space.adapter_weights(), get_peft_model_state_dict(model)
    assert set(weights) == set(reference)
    assert all(torch.equal(weights[key], reference[key]) for key in reference)


@pytest.mark.parametrize("kind", ["lora", "svd-half"])
def test_save_adapter_reloads_with_identical_outputs(tiny_model_dir, model, kind, tmp_path):
    from peft import PeftModel

    space = SPACES[kind](model)
    space.optimizer = SGD(learning_rate=0.1)
    space.apply_update(SeedUpdate(0, [21, 22], [0.5, -0.3]))
    mean_logits = logits(model)
    space.apply(Candidate(seed=9, scale=0.5))  # saving must write the mean, not this candidate
    space.save_adapter(str(tmp_path))
    assert torch.equal(logits(model), mean_logits)

    reloaded = PeftModel.from_pretrained(HFBackend.load(tiny_model_dir, dtype="float32").model, str(tmp_path))
    assert torch.allclose(logits(reloaded), mean_logits, rtol=0, atol=1e-6)
    greedy = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0}
    with torch.no_grad():
        expected = model.generate(input_ids=INPUT_IDS, **greedy)
        assert torch.equal(reloaded.generate(input_ids=INPUT_IDS, **greedy), expected)


# --- one step of each strategy through each space -----------------------------------------------

@pytest.mark.parametrize("kind", SPACES)
def test_one_openes_step_moves_the_mean(model, kind):
    space = SPACES[kind](model)
    space.optimizer = SGD(learning_rate=0.05)
    strategy = OpenES(population_size=4, sigma=0.1, antithetic=True)
    start = space.mean_vector()
    rewards = []
    for candidate in strategy.ask():
        space.apply(candidate)
        rewards.append(score(model))
        space.restore()
    update, _ = strategy.tell(rewards)
    space.apply_update(update)
    assert not np.array_equal(space.mean_vector(), start)
    assert torch.equal(torch.cat([f.weight.detach().reshape(-1) for f in space.factors]),
                       torch.cat([w.float().reshape(-1) for w in space.adapter_weights().values()]))


@pytest.mark.parametrize("kind", SPACES)
def test_one_cmaes_step_moves_the_mean(model, kind):
    space = SPACES[kind](model)
    start = space.mean_vector()
    strategy = CMAES(population_size=4, sigma=0.1, initial_mean=start, diagonal=kind == "lora")
    rewards = []
    for point in strategy.ask():
        space.apply(point)
        rewards.append(score(model))
        space.restore()
    update, _ = strategy.tell(rewards)
    space.apply_update(update)  # a MeanUpdate: the space adopts CMA-ES's mean
    assert np.array_equal(space.mean_vector(), np.float32(strategy.mean))
    assert not np.array_equal(space.mean_vector(), start)
    moved = snapshot(model)
    space.apply(strategy.mean)
    assert_identical(model, moved)  # the live adapter is the new mean

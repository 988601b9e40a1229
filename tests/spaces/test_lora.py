"""evotune.spaces.lora: init_lora_adapter, LoRASpace, and what every adapter space (AdapterSpace) adds to
the contract (test_contract.py): PEFT keys, saving a PEFT adapter that reloads with identical outputs."""

from __future__ import annotations

import pytest
import torch

from evotune.errors import ConfigError
from evotune.spaces import LoRASpace, noise
from evotune.spaces.lora import init_lora_adapter, lora_factors
from evotune.types import Candidate, SeedUpdate

INPUT_IDS = torch.tensor([[1, 17, 230, 4051, 99, 12]])


@torch.no_grad()
def logits(model) -> torch.Tensor:
    return model(input_ids=INPUT_IDS).logits  # (1, seq, vocab)


def test_init_lora_adapter_is_seeded_peft_default_and_keeps_the_global_rng(model_source):
    state = torch.random.get_rng_state()
    first = model_source.lora(random_b=False)
    again = model_source.lora(random_b=False)
    other = model_source.lora(random_b=False, seed=1)
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
        init_lora_adapter(model_source.base("float32"), init="orthogonal")


def test_lora_noise_is_named_per_module_and_factor(model_source):
    space = LoRASpace(model_source.lora())
    mean = {f.state_key: f.weight.detach().clone() for f in space.factors}
    space.apply(Candidate(seed=5, scale=0.1))
    for factor in space.factors:
        eps = noise(factor.weight.shape, 5, f"lora/{factor.module}/{factor.factor}")
        assert torch.equal(factor.weight, mean[factor.state_key] + 0.1 * eps), factor.state_key


def test_lora_dimension_is_every_adapter_entry(model_source):
    model = model_source.lora()
    assert LoRASpace(model).dimension == sum(p.numel() for name, p in model.named_parameters() if "lora_" in name)


# --- every adapter space ---------------------------------------------------------------------------

@pytest.mark.space_cases("adapter")
def test_adapter_weights_are_keyed_like_peft(space_case):
    from peft import get_peft_model_state_dict

    subject = space_case.build()
    subject.space.apply(Candidate(seed=4, scale=0.2))
    weights, reference = subject.space.adapter_weights(), get_peft_model_state_dict(subject.model)
    assert set(weights) == set(reference)
    assert all(torch.equal(weights[key], reference[key]) for key in reference)


@pytest.mark.space_cases("adapter")
def test_save_adapter_reloads_with_identical_outputs(space_case, model_source, tmp_path):
    from peft import PeftModel

    subject = space_case.build()
    space, model = subject.space, subject.model
    space.apply_update(SeedUpdate(0, [21, 22], [0.5, -0.3]))
    mean_logits = logits(model)
    space.apply(Candidate(seed=9, scale=0.5))  # saving must write the mean, not this candidate
    space.save_adapter(str(tmp_path))
    assert torch.equal(logits(model), mean_logits)

    reloaded = PeftModel.from_pretrained(model_source.base("float32"), str(tmp_path))
    assert torch.allclose(logits(reloaded), mean_logits, rtol=0, atol=1e-6)
    greedy = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0}
    with torch.no_grad():
        expected = model.generate(input_ids=INPUT_IDS, **greedy)
        assert torch.equal(reloaded.generate(input_ids=INPUT_IDS, **greedy), expected)

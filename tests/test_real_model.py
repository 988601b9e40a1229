"""The built-in SmolLM2-135M-Instruct end to end (minutes on CPU: marked slow, run before resolving)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    from evotune.backends import HFBackend

    return HFBackend.load("smollm2-135m-instruct", dtype="bfloat16")


def test_default_model_answers_an_instruction(smollm2):
    [reply] = smollm2.generate([[{"role": "user", "content": "What is 2 + 3? Reply with only the number."}]], 8)
    assert "5" in reply


def test_one_es_step_on_the_real_model_changes_all_weights_and_saves(smollm2, tmp_path):
    from transformers import AutoModelForCausalLM

    from evotune.config import TrainConfig
    from evotune.trainer import Trainer

    # conciseness: a graded reward, so four perturbations are (almost surely) not all tied
    config = TrainConfig(task="conciseness", population_size=4, antithetic=True, sigma=2e-3, learning_rate=4e-3,
                         iterations=1, batch_size=8, max_new_tokens=8, num_eval=8, report_to=[])
    trainer = Trainer(config, tmp_path / "run", backend=smollm2)
    before = {name: tensor.clone() for name, tensor in trainer.space.master.items()}
    trainer.train()
    assert all(not torch.equal(before[name], trainer.space.master[name]) for name in before)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "final", dtype=torch.bfloat16)
    assert sum(p.numel() for p in reloaded.parameters()) == sum(p.numel() for p in smollm2.model.parameters())


def test_essa_step_on_the_real_model_moves_only_the_adapter_and_reloads_in_peft(tmp_path):
    """svd_lora + cma on SmolLM2 (fresh gaussian adapter): one step, final/ is a PEFT adapter that
    generates exactly what the trained space generates."""
    from peft import PeftModel

    from evotune.backends import HFBackend
    from evotune.config import TrainConfig
    from evotune.trainer import Trainer

    config = TrainConfig(task="conciseness", space="svd_lora", strategy="cma", lora_init="gaussian",
                         singular_value_fraction=0.5, population_size=4, sigma=0.5, iterations=1, batch_size=4,
                         max_new_tokens=8, num_eval=4, dtype="float32", report_to=[])
    trainer = Trainer(config, tmp_path / "run")
    base = {name: p.detach().clone() for name, p in trainer.backend.model.named_parameters() if "lora_" not in name}
    before = trainer.space.adapter_weights()
    trainer.train()
    after = trainer.space.adapter_weights()
    assert any(not torch.equal(before[key], after[key]) for key in before)
    assert all(torch.equal(p, base[name]) for name, p in trainer.backend.model.named_parameters() if name in base)
    prompts = [row["prompt"] for row in trainer.task.eval_rows]
    expected = trainer.backend.generate(prompts, 8)
    reloaded = HFBackend.load("smollm2-135m-instruct", dtype="float32")
    reloaded.model = PeftModel.from_pretrained(reloaded.model, str(tmp_path / "run" / "final")).eval()
    assert reloaded.generate(prompts, 8) == expected


def test_population_batched_generation_equals_one_at_a_time_on_the_real_model():
    """The batched multi-adapter path on SmolLM2 (fp32) writes the same completions as applying
    each candidate and generating alone."""
    import numpy as np

    from evotune.backends import HFBackend
    from evotune.spaces.lora import init_lora_adapter
    from evotune.spaces.svd_lora import SVDLoRASpace
    from evotune.tasks import get_task

    backend = HFBackend.load("smollm2-135m-instruct", dtype="float32")
    backend.model = init_lora_adapter(backend.model, rank=8, init="gaussian", seed=0)
    space = SVDLoRASpace(backend.model, alpha=1.0)
    rng = np.random.default_rng(0)
    candidates = [space.mean_vector() + rng.normal(0.0, 0.3, space.dimension) for _ in range(4)]
    prompts = [row["prompt"] for row in get_task("arithmetic", num_eval=6).eval_rows]
    alone = []
    for candidate in candidates:
        space.apply(candidate)
        alone.append(backend.generate(prompts, 10))
    space.restore()
    assert len({tuple(c) for c in alone}) > 1  # the candidates really differ
    assert backend.generate_population(prompts, 10, space.factors, space.candidate_factors(candidates)) == alone

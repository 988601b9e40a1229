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

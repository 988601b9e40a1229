"""Model loading: local directories, GGUF files, aliases, hub ids, dtypes, and their errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from evotune.backends import HFBackend, resolve_model
from evotune.backends.models import ModelSource, load_model
from evotune.errors import ConfigError, ModelLoadError


def test_alias_resolves_to_the_packaged_gguf():
    source = resolve_model("smollm2-135m-instruct")
    assert source.gguf_file and source.gguf_file.endswith(".gguf")


def test_gguf_path_and_directory_resolution(tmp_path):
    packaged = resolve_model("smollm2")
    assert resolve_model(f"{packaged.path}/{packaged.gguf_file}") == packaged
    assert resolve_model(packaged.path) == packaged  # a directory holding only a .gguf
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct") == ModelSource("HuggingFaceTB/SmolLM2-135M-Instruct")


def test_missing_paths_and_unusable_directories_are_clear_errors(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        resolve_model(str(tmp_path / "nope.gguf"))
    with pytest.raises(ModelLoadError, match="neither config.json nor a .gguf"):
        resolve_model(str(tmp_path))


def test_unreachable_hub_id_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="could not load model"):
        load_model("evotune-test/not-a-real-model-id")


@pytest.mark.slow
def test_unreachable_hub_id_without_offline_mode_is_a_clear_error():
    """As a user without HF_HUB_OFFLINE meets it: huggingface_hub retries the network first (~45 s here)."""
    environment = {key: value for key, value in os.environ.items() if key != "HF_HUB_OFFLINE"}
    script = ("from evotune.backends.models import load_model\n"
              "load_model('evotune-test/not-a-real-model-id')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          env=environment)
    assert done.returncode != 0 and "could not load model" in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_local_directory_loads_in_each_dtype(tiny_model_dir, dtype):
    backend = HFBackend.load(tiny_model_dir, dtype=dtype)
    assert {p.dtype for p in backend.model.parameters()} == {getattr(torch, dtype)}
    assert backend.tokenizer.padding_side == "left" and backend.tokenizer.pad_token is not None


def test_bad_dtype_names_the_choices(tiny_model_dir):
    with pytest.raises(ConfigError, match="float32, bfloat16, float16"):
        HFBackend.load(tiny_model_dir, dtype="int3")


def test_generation_is_batched_and_deterministic(tiny_backend):
    prompts = ["Hello there", [{"role": "user", "content": "What is 2 + 2?"}], "A much longer prompt than the rest"]
    first = tiny_backend.generate(prompts, max_new_tokens=5)
    assert len(first) == 3 and all(isinstance(text, str) and text for text in first)
    assert first == tiny_backend.generate(prompts, max_new_tokens=5)  # greedy: the same every time


def test_lm_head_gets_contiguous_input_and_the_same_generations(tiny_model_dir):
    """The head hook (backends/hf.py) only changes memory layout: a frozen model, whose head matmul
    would otherwise expand its weight per row, generates exactly what it did without the hook."""
    from evotune.backends.hf import contiguous_head_input

    prompts = ["What is 2 + 3?", "Name a colour.", "7"]
    model, tokenizer = load_model(tiny_model_dir, "float32")
    model.requires_grad_(False)  # as PEFT leaves the base (and a tied head)
    bare = HFBackend.__new__(HFBackend)  # the backend without its __init__, so without the hook
    bare.model, bare.tokenizer, bare.generation_batch_size, bare._encoded = model, tokenizer, None, {}
    bare.shared_prefix, bare.compile_generation = False, False  # the plain padded batch, eager, as before the hook
    expected = bare.generate(prompts, 6)

    contiguous_head_input(model)
    contiguous_head_input(model)  # idempotent: one hook, however often it is asked for
    head = model.get_output_embeddings()
    assert len(head._forward_pre_hooks) == 1
    seen: list[bool] = []
    head.register_forward_pre_hook(lambda module, args: seen.append(args[0].is_contiguous()))
    assert HFBackend(model, tokenizer).generate(prompts, 6) == expected
    assert seen and all(seen)

"""The vLLM backend's GGUF export (backends/vllm.py, exported_gguf): vLLM loads HF directories, so a GGUF model is
saved once as one in evotune's cache, written as `evotune export` writes (files.atomic.staged). A failed or killed
export leaves no directory an engine would load, and the next call writes it whole.

The tiny model stands in for the GGUF file: exported_gguf keys the cache on the file's stat and loads the model with
load_model, which dequantizes a real GGUF the same way (tests/backends/test_models.py); what is tested here is the
cache's writing, which does not depend on the format read."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import KILL_AFTER_WEIGHTS

from evotune.backends.models import ModelSource
from evotune.backends.vllm import exported_gguf


def cache_of(home: Path) -> Path:
    return home / "evotune" / "gguf-export"


def test_a_failed_export_leaves_nothing_and_the_next_one_is_whole(tiny_model_dir, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerBase

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    source = ModelSource(tiny_model_dir, "model.safetensors")

    def full_disk(self, *args, **kwargs):  # the weights are written, then the tokenizer fails
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(PreTrainedTokenizerBase, "save_pretrained", full_disk)
        with pytest.raises(OSError, match="No space left"):
            exported_gguf(tiny_model_dir, source)
    assert [path.name for path in cache_of(tmp_path).iterdir() if not path.name.endswith(".lock")] == []

    target = Path(exported_gguf(tiny_model_dir, source))
    assert target.parent == cache_of(tmp_path) and (target / "tokenizer_config.json").exists()
    assert AutoModelForCausalLM.from_pretrained(target).config.num_hidden_layers == 2
    assert exported_gguf(tiny_model_dir, source) == str(target)  # written once


@pytest.mark.engine  # a process killed and resumed: the engine tier
def test_a_killed_export_leaves_only_its_staging_which_the_next_call_replaces(tiny_model_dir, tmp_path,
                                                                                   monkeypatch):
    # kill -9 after the weights are written and before the tokenizer: a torn export, as a crash would leave it
    script = KILL_AFTER_WEIGHTS + f"""
from evotune.backends.models import ModelSource
from evotune.backends.vllm import exported_gguf
exported_gguf({tiny_model_dir!r}, ModelSource({tiny_model_dir!r}, "model.safetensors"))
"""
    environment = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            env=environment)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    [staging] = [path for path in cache_of(tmp_path).iterdir() if not path.name.endswith(".lock")]
    assert staging.name.endswith(".partial") and (staging / "config.json").exists()  # written, never moved

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    target = Path(exported_gguf(tiny_model_dir, ModelSource(tiny_model_dir, "model.safetensors")))
    assert [path for path in cache_of(tmp_path).iterdir() if not path.name.endswith(".lock")] == [target]
    assert (target / "config.json").exists() and (target / "tokenizer_config.json").exists()

"""The suite's own session set-up does what conftest.py says: one cut tokenizer per session, shared through the
folder conftest names, and evotune's sources byte-compiled where no process would write them."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
from helpers import TINY_VOCAB, TOKENIZER_CACHE


def test_the_tiny_models_tokenizer_comes_from_the_sessions_folder(tiny_model_dir):
    cached = Path(os.environ[TOKENIZER_CACHE]) / f"smollm2-{TINY_VOCAB}" / "tokenizer.json"
    vocab = json.loads(cached.read_text(encoding="utf-8"))["model"]["vocab"]
    assert len(vocab) == TINY_VOCAB
    model_vocab = json.loads((Path(tiny_model_dir) / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    assert model_vocab == vocab


def test_evotunes_sources_are_byte_compiled_when_no_process_would_write_them():
    import evotune.trainer

    if not sys.dont_write_bytecode:
        pytest.skip("Python writes the .pyc files itself here (PYTHONDONTWRITEBYTECODE is not set)")
    for module in (sys.modules["evotune"], evotune.trainer):
        assert Path(importlib.util.cache_from_source(module.__file__)).is_file(), module.__name__

"""Backends: load a model and generate completions (forward passes only)."""

from .base import Backend
from .hf import HFBackend, render_prompt
from .models import ALIASES, DEFAULT_MODEL, DTYPES, load_model, resolve_model

BACKENDS = {"hf": HFBackend}

__all__ = ["ALIASES", "BACKENDS", "Backend", "DEFAULT_MODEL", "DTYPES", "HFBackend", "load_model", "render_prompt",
           "resolve_model"]

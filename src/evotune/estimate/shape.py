"""A decoder's shape: the numbers that set what it costs (hidden size, layers, heads, KV heads, MLP width,
vocabulary, tied embeddings, q/k/v biases), read from a model's config without loading a weight.

A model is named as the run commands name it (the built-in alias, a directory, a .gguf file, a hub id found in the
local cache) or as a config.json path; a few public models are known by name here so that `evotune estimate`
answers for them on a machine that has never downloaded them (their published config numbers).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import AutoConfig

from ..backends.models import resolve_model
from ..errors import ConfigError, ModelLoadError


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    attention_bias: bool = False  # Qwen2: biases on q/k/v
    max_position_embeddings: int | None = None  # the context a prompt and its completion must fit in (None: unknown)

    def __post_init__(self) -> None:
        """A shape no model has (a size of 0 or below, heads that do not divide the width) is refused by its field:
        the counts below would print 0 or negative parameters, memory and seconds as if they were estimates."""
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                    "intermediate_size", "vocab_size"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"model {self.name!r}: `{key}` is {value!r} in its config; every size of a model "
                                  "is a whole number of at least 1. Check its config.json.")
        if self.hidden_size % self.num_attention_heads or self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(f"model {self.name!r}: {self.num_attention_heads} attention heads and "
                              f"{self.num_key_value_heads} key-value heads do not divide `hidden_size` "
                              f"{self.hidden_size} (and each other); check its config.json.")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def parameters(self) -> int:
        """Parameters from the shape alone: embeddings (and an untied head), attention, MLP, norms, q/k/v biases."""
        hidden, kv = self.hidden_size, self.num_key_value_heads * self.head_dim
        attention = 2 * hidden * hidden + 2 * hidden * kv  # q and o; k and v
        if self.attention_bias:
            attention += hidden + 2 * kv
        layer = attention + 3 * hidden * self.intermediate_size + 2 * hidden  # MLP (gate, up, down), two RMSNorms
        embeddings = self.vocab_size * hidden * (1 if self.tie_word_embeddings else 2)
        return self.num_hidden_layers * layer + embeddings + hidden  # the final norm

    def lora_parameters(self, rank: int, target_modules: list[str]) -> int:
        """Parameters of a rank-`rank` LoRA on `target_modules` (A: rank x in, B: out x rank, per layer)."""
        hidden, kv, mlp = self.hidden_size, self.num_key_value_heads * self.head_dim, self.intermediate_size
        sizes = {"q_proj": (hidden, hidden), "k_proj": (hidden, kv), "v_proj": (hidden, kv), "o_proj": (hidden, hidden),
                 "gate_proj": (hidden, mlp), "up_proj": (hidden, mlp), "down_proj": (mlp, hidden)}
        per_layer = sum(rank * (sizes[name][0] + sizes[name][1]) for name in target_modules if name in sizes)
        return self.num_hidden_layers * per_layer

    @classmethod
    def from_hf_config(cls, config: Any, name: str) -> ModelShape:
        text = getattr(config, "text_config", None) or config  # a multimodal config's language model
        heads = text.num_attention_heads
        return cls(name=name, hidden_size=text.hidden_size, num_hidden_layers=text.num_hidden_layers,
                   num_attention_heads=heads, num_key_value_heads=getattr(text, "num_key_value_heads", None) or heads,
                   intermediate_size=text.intermediate_size, vocab_size=text.vocab_size,
                   tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
                   attention_bias=text.model_type == "qwen2" or bool(getattr(text, "attention_bias", False)),
                   max_position_embeddings=getattr(text, "max_position_embeddings", None))


# Published config.json numbers: hidden, layers, heads, KV heads, MLP, vocabulary, tied, q/k/v biases
PUBLIC_SHAPES = {shape.name: shape for shape in [
    ModelShape("HuggingFaceTB/SmolLM2-135M-Instruct", 576, 30, 9, 3, 1536, 49_152, True),
    ModelShape("HuggingFaceTB/SmolLM2-360M-Instruct", 960, 32, 15, 5, 2560, 49_152, True),
    ModelShape("HuggingFaceTB/SmolLM2-1.7B-Instruct", 2048, 24, 32, 32, 8192, 49_152, True),
    ModelShape("Qwen/Qwen2.5-0.5B-Instruct", 896, 24, 14, 2, 4864, 151_936, True, True),
    ModelShape("Qwen/Qwen2.5-1.5B-Instruct", 1536, 28, 12, 2, 8960, 151_936, True, True),
    ModelShape("Qwen/Qwen2.5-3B-Instruct", 2048, 36, 16, 2, 11008, 151_936, True, True),
    ModelShape("Qwen/Qwen2.5-7B-Instruct", 3584, 28, 28, 4, 18944, 152_064, False, True),
    ModelShape("meta-llama/Meta-Llama-3-8B-Instruct", 4096, 32, 32, 8, 14336, 128_256, False),
]}


def _public(name: str) -> ModelShape | None:
    """A public shape by its hub id, with or without the owner, the -Instruct suffix (Qwen2.5-1.5B) and the family's
    maker in its name (Llama-3-8B for Meta-Llama-3-8B)."""
    wanted = name.lower().removesuffix("-instruct")
    for shape in PUBLIC_SHAPES.values():
        full = shape.name.lower().removesuffix("-instruct")
        bare = full.split("/", 1)[1]
        if wanted in (full, bare, bare.removeprefix("meta-")):
            return shape
    return None


def resolve_shape(model: str) -> ModelShape:
    """The shape of `model` (what a run's `model` key takes, or a config.json path), read from its config only."""
    path = Path(model).expanduser()
    config_file = path if path.is_file() and path.name.endswith(".json") else path / "config.json"
    if config_file.is_file():  # a malformed one is named as such, not taken for a missing one
        try:
            json.loads(config_file.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ConfigError(f"{config_file} is not valid JSON ({error}); fix the file, or give another model.") \
                from None
    if path.is_file() and path.name.endswith(".json"):
        try:
            config = AutoConfig.from_pretrained(path.parent if path.name == "config.json" else path)
        except Exception as error:  # noqa: BLE001 - transformers' own architecture checks raise several types
            reason = str(error).strip().splitlines()[-1].strip()
            raise ConfigError(f"{path}: transformers refuses this config ({reason}); check its sizes.") from None
        return ModelShape.from_hf_config(config, model)
    public = _public(model)
    try:
        source = resolve_model(model)
        options = {"gguf_file": source.gguf_file} if source.gguf_file else {}
        config = AutoConfig.from_pretrained(source.path, local_files_only=True, **options)
    except (OSError, ValueError, ModelLoadError) as error:
        if public is not None:
            return public
        known = ", ".join(sorted(shape.name.split("/")[1] for shape in PUBLIC_SHAPES.values()))
        raise ConfigError(f"no config found for model {model!r} ({error.__class__.__name__}): give a directory "
                          f"written by save_pretrained, its config.json, a hub id in the local cache, or one of "
                          f"the shapes known offline: {known}.") from None
    return ModelShape.from_hf_config(config, model)

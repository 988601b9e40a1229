"""The scaling study's model shapes: public architectures rebuilt from their config numbers with random weights.

What a forward pass costs depends on a model's shape (hidden size, layers, heads, KV heads, MLP width, vocabulary,
tied embeddings), not on what its weights learned, so a random-weight model of a public shape costs what the
trained one does per token. Every shape uses SmolLM2's tokenizer (the built-in model's, the only one on disk here),
so its vocabulary is resized to that tokenizer's 49,152 tokens: the embedding (and an untied head) shrinks with it,
and the table says so. Weights come from a fixed seed in the run's dtype and are cached on disk (never committed).
The numbers are each model's published config.json.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

TOKENIZER_VOCAB = 49_152  # SmolLM2's tokenizer: every shape's vocabulary here
WEIGHTS_SEED = 0


@dataclass(frozen=True)
class Shape:
    name: str
    architecture: str  # "llama" or "qwen2" (Qwen2 adds biases to q/k/v)
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    tie_word_embeddings: bool
    published_vocab: int  # the model's own vocabulary, before it is resized to TOKENIZER_VOCAB
    gpu_only: bool = False  # larger than this study runs on a 24 GiB, 2-core CPU machine
    published: bool = True  # False: no public model, a shape of other proportions (PROPORTIONS) for the time fit

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def parameters(self, vocab: int = TOKENIZER_VOCAB) -> int:
        """Parameter count at `vocab` (from the shape alone: evotune estimate's count)."""
        return self.model_shape(vocab).parameters()

    def model_shape(self, vocab: int = TOKENIZER_VOCAB):
        """The shape as `evotune estimate` counts it, at `vocab`."""
        from evotune.estimate.shape import ModelShape

        return ModelShape(self.name, self.hidden_size, self.num_hidden_layers, self.num_attention_heads,
                          self.num_key_value_heads, self.intermediate_size, vocab, self.tie_word_embeddings,
                          self.architecture == "qwen2")


SHAPES = {shape.name: shape for shape in [
    Shape("SmolLM2-135M", "llama", 576, 30, 9, 3, 1536, True, 49_152),
    Shape("SmolLM2-360M", "llama", 960, 32, 15, 5, 2560, True, 49_152),
    Shape("Qwen2.5-0.5B", "qwen2", 896, 24, 14, 2, 4864, True, 151_936),
    Shape("Qwen2.5-1.5B", "qwen2", 1536, 28, 12, 2, 8960, True, 151_936),
    Shape("SmolLM2-1.7B", "llama", 2048, 24, 32, 32, 8192, True, 49_152),
    Shape("Qwen2.5-3B", "qwen2", 2048, 36, 16, 2, 11008, True, 151_936, gpu_only=True),
    Shape("Qwen2.5-7B", "qwen2", 3584, 28, 28, 4, 18944, False, 152_064, gpu_only=True),
    Shape("Llama-3-8B", "llama", 4096, 32, 32, 8, 14336, False, 128_256, gpu_only=True),
    # Of no public model: the public shapes all keep layers and width in one proportion (about 20 to 40 layers),
    # so a fit on them alone cannot tell a per-layer cost from a per-parameter one. These two pull them apart
    # (Llama layout, SmolLM2's head size of 64), so `evotune estimate`'s time holds on a shape of other proportions.
    Shape("deep-narrow-40L", "llama", 256, 40, 4, 2, 768, True, 49_152, published=False),
    # deep-narrow's width at a public shape's depth: left out of the fit, deep-narrow's cost per layer of small
    # matmuls is otherwise seen only through wider shapes, where the matmuls' own work hides it
    Shape("narrow-12L", "llama", 256, 12, 4, 2, 768, True, 49_152, published=False),
    # the same width at a third depth: with 12 and 40 layers alone, a cost per layer and a cost per decode step
    # (fixed work each new token pays whatever the depth) fit the narrow shapes equally well
    Shape("narrow-24L", "llama", 256, 24, 4, 2, 768, True, 49_152, published=False),
    Shape("shallow-wide-4L", "llama", 1536, 4, 24, 8, 6144, True, 49_152, published=False),
]}
PROPORTIONS = [name for name, shape in SHAPES.items() if not shape.published]


def hf_config(shape: Shape, dtype: str):
    """The transformers config of a shape at the tokenizer's vocabulary."""
    from transformers import LlamaConfig, Qwen2Config

    common = {"hidden_size": shape.hidden_size, "num_hidden_layers": shape.num_hidden_layers,
              "num_attention_heads": shape.num_attention_heads, "num_key_value_heads": shape.num_key_value_heads,
              "intermediate_size": shape.intermediate_size, "tie_word_embeddings": shape.tie_word_embeddings,
              "vocab_size": TOKENIZER_VOCAB, "max_position_embeddings": 8192, "dtype": dtype}
    special = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}  # SmolLM2's <|im_start|>, <|im_end|>
    if shape.architecture == "qwen2":
        return Qwen2Config(**common, **special, rope_theta=1_000_000.0)
    return LlamaConfig(**common, **special, rope_theta=100_000.0)


def build(shape: Shape, dtype: str, cache: Path, max_new_tokens: int) -> Path:
    """The shape's random-weight model directory under `cache` (built once: weights from WEIGHTS_SEED, SmolLM2's
    tokenizer, and a generation config that forces every completion to `max_new_tokens`, so a random model's early
    end of sequence never shortens a cell's work)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from evotune.backends.models import resolve_model

    directory = cache / f"{shape.name}-{dtype}"
    if (directory / "built.json").is_file():
        return directory
    partial = directory.with_name(directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # a build killed midway starts again whole
    torch.manual_seed(WEIGHTS_SEED)
    # on a GPU the random weights are drawn there (an 8B model's initialization takes minutes on a CPU's cores)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(hf_config(shape, dtype), dtype=getattr(torch, dtype))
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=2,
                                               max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens)
    model.save_pretrained(partial)
    source = resolve_model("smollm2")
    AutoTokenizer.from_pretrained(source.path, gguf_file=source.gguf_file).save_pretrained(partial)
    counted = sum(parameter.numel() for parameter in model.parameters())
    (partial / "built.json").write_text(json.dumps({**asdict(shape), "parameters": counted, "dtype": dtype,
                                                    "vocab": TOKENIZER_VOCAB, "seed": WEIGHTS_SEED}, indent=1))
    del model
    shutil.rmtree(directory, ignore_errors=True)
    partial.replace(directory)
    return directory

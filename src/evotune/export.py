"""`evotune export`: write a plain transformers model directory.

Adapter runs (space lora / svd_lora) end with a PEFT adapter in DIR/final; export folds it
into the base weights (W + scale * B A, PEFT's merge_and_unload) so the result loads with
AutoModelForCausalLM alone. Given a plain model, export converts it (e.g. the built-in GGUF
model) into a save_pretrained directory, which is what bitsandbytes quantization loads.
"""

from __future__ import annotations

from .backends.models import find_adapter, load_model, torch_dtype
from .errors import ConfigError


def export_model(model: str, output_dir: str, merge: bool = False, dtype: str = "float32") -> dict:
    """Save `model` (alias, directory, .gguf, hub id, adapter or run directory) with save_pretrained."""
    adapter = find_adapter(model)
    if adapter is not None and not merge:
        raise ConfigError(f"{model} is a LoRA adapter (it already loads with peft.PeftModel.from_pretrained); "
                          "pass --merge to write a merged model that transformers loads alone.")
    # Load and merge in fp32, then cast: merging into bf16 would round B A before the addition.
    loaded, tokenizer = load_model(model, "float32", "cpu")
    if adapter is not None:
        loaded = loaded.merge_and_unload()
    loaded.to(torch_dtype(dtype)).save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return {"output_dir": output_dir, "model": model, "adapter": str(adapter[0]) if adapter else None,
            "base": adapter[1] if adapter else model, "dtype": dtype}

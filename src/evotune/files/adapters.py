"""Checks on a PEFT LoRA adapter directory before PEFT reads it.

PEFT's own errors on a bad adapter are raw tracebacks (a JSON decode error, a safetensors header
error, a size-mismatch RuntimeError), and a missing weights file makes it look for the adapter on
the hub. `check_adapter` reads the directory first and names what is wrong and what to do:
every command that loads an adapter (`train` with `adapter:`, `grpo --set adapter=`, `eval` of an
adapter or an adapter run) goes through it.
"""

from __future__ import annotations

import json
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

from ..errors import ConfigError

REQUIRED_KEYS = ("peft_type", "r")  # target_modules may be null: PEFT then picks per architecture
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")
PEFT_PREFIX = "base_model.model."  # PEFT's saved keys: base_model.model.<module>.lora_A.weight


def read_adapter_config(adapter: str | Path) -> dict[str, Any]:
    """The adapter's adapter_config.json: a JSON object with PEFT's required keys, or a ConfigError naming the file."""
    path = Path(adapter) / "adapter_config.json"
    if not path.exists():
        raise ConfigError(f"`adapter` is {str(adapter)!r}, which holds no adapter_config.json; point it at a PEFT "
                          "adapter directory (an `evotune sft` run writes DIR/adapter), or remove `adapter` "
                          "to start from a fresh LoRA.")
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(f"{path} is not valid JSON ({error}); the adapter directory is damaged. Save the adapter "
                          "again (peft's save_pretrained, or re-run `evotune sft`).") from error
    if not isinstance(values, dict):
        raise ConfigError(f"{path} holds a JSON {type(values).__name__}, not PEFT's adapter config object; "
                          "save the adapter again with peft's save_pretrained.")
    missing = [key for key in REQUIRED_KEYS if key not in values]
    if missing:
        raise ConfigError(f"{path} lacks {', '.join(missing)}: it is not a PEFT LoRA adapter config. Save the "
                          "adapter again with peft's save_pretrained.")
    if values["peft_type"] != "LORA" or not isinstance(values["r"], int) or values["r"] < 1:
        raise ConfigError(f"{path}: peft_type {values['peft_type']!r}, r {values['r']!r}; evotune loads LoRA "
                          "adapters (peft_type LORA, r a positive integer).")
    return values


def adapter_weight_shapes(adapter: str | Path) -> dict[str, tuple[int, ...]]:
    """{saved key: shape} of the adapter's weights file, read without loading the tensors (safetensors)."""
    directory = Path(adapter)
    found = [directory / name for name in WEIGHT_FILES if (directory / name).exists()]
    if not found:
        # PEFT would fall through to a hub download of the directory's name: say what is missing instead.
        raise ConfigError(f"adapter {directory} has adapter_config.json but no weights ({' or '.join(WEIGHT_FILES)}); "
                          "copy the whole adapter directory, or save it again with peft's save_pretrained.")
    path = found[0]
    try:
        if path.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as weights:  # the header only: no tensor is read
                names = list(weights.keys())
                return {key: tuple(weights.get_slice(key).get_shape()) for key in names}
        import torch

        state = torch.load(path, map_location="cpu", weights_only=True)
        return {key: tuple(value.shape) for key, value in state.items()}
    except pickle.UnpicklingError as error:
        if refused_pickle(error):  # more than tensors in it: a pickle that would run code to load
            raise ConfigError(PICKLE_REFUSAL.format(path=path)) from error
        raise ConfigError(f"{path} cannot be read ({type(error).__name__}: {error}); the file is damaged or "
                          "incomplete. Copy it again, or save the adapter again.") from error
    except Exception as error:  # safetensors, pickle and zip each raise their own kind on a damaged file
        raise ConfigError(f"{path} cannot be read ({type(error).__name__}: {error}); the file is damaged or "
                          "incomplete. Copy it again, or save the adapter again.") from error


# One line for every pickle that holds more than tensors, wherever a weight or state is read (adapters, models,
# GRPO's optimizer, scheduler and RNG state on --resume): loading one can run any code it carries.
PICKLE_REFUSAL = ("{path}: pickle files are not loaded (loading one can run the code it carries); convert to "
                  "safetensors (save_pretrained(..., safe_serialization=True) where you trust the file).")


def refused_pickle(error: BaseException) -> bool:
    """torch's weights-only loader refusing a pickle of more than tensors (a global it does not allow), not a damaged
    file, which its UnpicklingError says too but without "can still be loaded"."""
    text = str(error)
    return isinstance(error, pickle.UnpicklingError) and ("Unsupported global" in text or "can still be loaded" in text)


def module_name(key: str) -> tuple[str, str] | None:
    """(base module name, "A" or "B") of a saved LoRA key; None for other entries (biases, embeddings, DoRA)."""
    for factor in ("A", "B"):
        suffix = f".lora_{factor}.weight"
        if key.endswith(suffix):
            return key.removeprefix(PEFT_PREFIX).removesuffix(suffix), factor
    return None


def check_shapes(adapter: str | Path, shapes: dict[str, tuple[int, ...]], model: Any) -> None:
    """Every LoRA factor fits its base module: A is (r, in_features), B is (out_features, r)."""
    modules = dict(model.named_modules())
    for key, shape in sorted(shapes.items()):
        parsed = module_name(key)
        if parsed is None:
            continue
        name, factor = parsed
        module = modules.get(name)
        if module is None:
            raise ConfigError(f"adapter {adapter} adapts module {name}, which the base model lacks: the adapter was "
                              "trained on another model. Load it with its own base model, or remove `adapter`.")
        if not hasattr(module, "in_features"):  # not a Linear (e.g. GPT-2's Conv1D): PEFT checks it itself
            continue
        rank = shape[0] if factor == "A" else shape[-1]
        expected = (rank, module.in_features) if factor == "A" else (module.out_features, rank)
        if tuple(shape) != expected:
            raise ConfigError(f"adapter {adapter}: {name}.lora_{factor} has shape {tuple(shape)}, but the base "
                              f"model's {name} needs {expected} (in {module.in_features}, out "
                              f"{module.out_features}): the adapter belongs to a base model of another size. Load "
                              "it with its own base model, or remove `adapter`.")


def missing_target_modules(model: Any, target_modules: Any) -> list[str]:
    """The names in `target_modules` (PEFT's list form) that match no module of `model` (PEFT matches a name
    or a dotted suffix); a string (a regex, or "all-linear") is PEFT's to resolve."""
    if isinstance(target_modules, str) or not target_modules:
        return []
    names = [name for name, _ in model.named_modules()]
    return [target for target in target_modules
            if not any(name == target or name.endswith("." + target) for name in names)]


def linear_module_suffixes(model: Any) -> list[str]:
    """The last name part of every Linear-like module (e.g. q_proj, up_proj): what target_modules can name."""
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                   if hasattr(module, "in_features") and name})


def check_target_modules(model: Any, target_modules: Any, source: str) -> None:
    """A ConfigError naming the target modules the model lacks and the ones it has."""
    missing = missing_target_modules(model, target_modules)
    if missing:
        raise ConfigError(f"{source}: target module(s) {', '.join(missing)} match no module of the base model; its "
                          f"linear modules are {', '.join(linear_module_suffixes(model))} (or use 'all-linear').")


def same_model(first: str, second: str) -> bool:
    """Whether two model names mean the same model: equal paths, or the same final name (a hub id
    `org/Name` and a local copy `.../Name`), case aside."""
    if os.path.exists(first) and os.path.exists(second):
        return Path(first).resolve() == Path(second).resolve()
    return Path(first.rstrip("/")).name.lower() == Path(second.rstrip("/")).name.lower()


def check_adapter(adapter: str | Path, model: Any, model_name: str | None = None) -> dict[str, Any]:
    """Validate the adapter directory against the loaded base `model` before PEFT reads it; its config.

    Damaged or missing files, unknown target modules and shapes of another base are ConfigErrors; an
    adapter recorded for another base (`base_model_name_or_path`) than `model_name` is a warning, since
    a fine-tuned copy of the same base is a legitimate base too."""
    config = read_adapter_config(adapter)
    shapes = adapter_weight_shapes(adapter)
    check_target_modules(model, config.get("target_modules"), f"adapter {adapter} (adapter_config.json)")
    check_shapes(adapter, shapes, model)
    recorded = config.get("base_model_name_or_path")
    # the loaded model's own record names it too: the built-in `smollm2-135m-instruct` loads from its package's
    # directory, which is what an adapter trained on it records
    loaded = getattr(model, "name_or_path", None) or getattr(getattr(model, "config", None), "_name_or_path", None)
    if model_name and recorded and not same_model(str(recorded), str(model_name)) and not (
            loaded and same_model(str(recorded), str(loaded))):
        warnings.warn(f"adapter {adapter} was trained on {recorded}, but the base model here is {model_name}; "
                      "the shapes match, so it loads, but its effect on another base is not what it learned.",
                      stacklevel=2)
    return config

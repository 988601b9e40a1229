"""bitsandbytes INT8 / INT4 base weights (ESSA's quantized runs), on CUDA and on CPU.

ESSA evolves only a LoRA adapter, so the base can stay quantized: every candidate is forward passes
through the frozen base plus its own fp32 adapter. bitsandbytes 0.50 runs both formats on a CPU too
(LLM.int8 through torch._int_mm, 4-bit through a fused bfloat16 kernel on CPUs with avx512_bf16), so
`quantization` works wherever `device` is cpu or cuda. Only the adapter spaces, `evotune sft` (LoRA on a
quantized base, as QLoRA) and evaluation take it: full-parameter and lowrank-es write the base weights,
which packed INT8/INT4 storage cannot hold (config/train.py refuses them).

This module is the only one besides backends/models.py that imports bitsandbytes (behind
is_bitsandbytes_available()).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, ModelLoadError
from ..import_utils import INSTALL_HINTS, is_bitsandbytes_available

QUANTIZATIONS = ("none", "int8", "int4")  # config.Quantization's choices
INT4_TYPES = ("nf4", "fp4")  # config.Int4Type's choices
# bitsandbytes' CPU layout for 4-bit inference groups output rows by 32 (functional.py,
# _convert_weight_packed_for_cpu: "N must be divisible by block_n"); other shapes fail inside forward().
CPU_4BIT_ROW_BLOCK = 32


@dataclass(frozen=True)
class QuantizationSettings:
    """How the base weights are stored: `method` none / int8 / int4, and the int4 choices (TrainConfig's
    `quantization`, `int4_type`, `int4_double_quantization`, `int4_compute_dtype`; their help is there)."""

    method: str = "none"
    int4_type: str = "nf4"
    double_quantization: bool = False
    compute_dtype: str | None = None  # None: the run's `dtype`

    @classmethod
    def from_config(cls, config: Any) -> QuantizationSettings:
        """From any config with the `quantization` and `int4_*` keys (TrainConfig, SFTConfig)."""
        return cls(config.quantization, config.int4_type, config.int4_double_quantization, config.int4_compute_dtype)

    @classmethod
    def coerce(cls, value: str | QuantizationSettings) -> QuantizationSettings:
        """A method name ("int8") means that method with the default int4 choices."""
        return value if isinstance(value, cls) else cls(str(value))

    def check(self) -> None:
        """Refuse an unknown method or 4-bit type, naming the key and its choices."""
        if self.method not in QUANTIZATIONS:
            raise ConfigError(f"`quantization` is {self.method!r}; set it to one of {', '.join(QUANTIZATIONS)}.")
        if self.int4_type not in INT4_TYPES:
            raise ConfigError(f"`int4_type` is {self.int4_type!r}; set it to one of {', '.join(INT4_TYPES)}.")


def _not_the_int8_cast_notice(record: logging.LogRecord) -> bool:
    """LLM.int8 quantizes activations from float16, and bitsandbytes says so at every matmul of a float32 or
    bfloat16 model (588 times in one tiny ESSA iteration); the cast is the method, not a problem."""
    return "inputs will be cast from" not in record.getMessage()


def bitsandbytes_kwargs(settings: QuantizationSettings, dtype: str, device: str, gguf: bool) -> dict:
    """from_pretrained arguments that load the base with bitsandbytes INT8 or INT4 weights on `device`.

    `dtype`: the run's dtype (already resolved), the 4-bit compute dtype unless `int4_compute_dtype` is set.
    """
    settings.check()
    device_type = device.split(":")[0]
    if device_type not in ("cpu", "cuda"):
        raise ConfigError(f"`quantization: {settings.method}` runs bitsandbytes on cpu or cuda; this run is on "
                          f"{device!r}. Set `device: cpu` (or cuda), or `quantization: none`.")
    if not is_bitsandbytes_available():
        raise ConfigError(f"`quantization: {settings.method}` needs bitsandbytes: {INSTALL_HINTS['bitsandbytes']}.")
    if gguf:
        raise ConfigError(f"`quantization: {settings.method}` cannot re-quantize a GGUF file; save the model as a "
                          "directory first (evotune export NAME --output-dir DIR) and set `model: DIR`.")
    import torch
    from transformers import BitsAndBytesConfig

    if settings.method == "int8":
        logging.getLogger("bitsandbytes.autograd._functions").addFilter(_not_the_int8_cast_notice)  # once: same filter
        config = BitsAndBytesConfig(load_in_8bit=True)
    else:
        compute = getattr(torch, settings.compute_dtype or dtype)
        config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=settings.int4_type,
                                    bnb_4bit_use_double_quant=settings.double_quantization,
                                    bnb_4bit_compute_dtype=compute)
    return {"quantization_config": config, "device_map": {"": device}}


def quantized_linears(model: Any) -> list[tuple[str, Any]]:
    """(name, module) of every bitsandbytes Linear8bitLt / Linear4bit in `model`."""
    import bitsandbytes

    kinds = (bitsandbytes.nn.Linear8bitLt, bitsandbytes.nn.Linear4bit)
    return [(name, module) for name, module in model.named_modules() if isinstance(module, kinds)]


def check_cpu_4bit_shapes(model: Any) -> None:
    """On a CPU with avx512_bf16, bitsandbytes repacks each 4-bit weight at its first inference forward into
    blocks of 32 output rows; refuse a model whose shapes do not fit, naming the first module, before that
    forward fails with a bare AssertionError."""
    import bitsandbytes

    for name, module in quantized_linears(model):
        if not isinstance(module, bitsandbytes.nn.Linear4bit) or not module.support_avx512bf16_for_cpu:
            continue
        if module.out_features % CPU_4BIT_ROW_BLOCK or module.in_features % 2:
            raise ModelLoadError(f"{name} is {module.in_features} -> {module.out_features}: bitsandbytes' CPU "
                                 f"4-bit kernel needs out_features divisible by {CPU_4BIT_ROW_BLOCK} and an even "
                                 "in_features. Use `quantization: int8` (or none) for this model, or run on CUDA.")


def keep_trainable_layout(model: Any) -> int:
    """Make the 4-bit base trainable through: returns how many layers were changed.

    bitsandbytes 0.50.2 on a CPU with avx512_bf16 repacks a Linear4bit's weight at its first eval-mode
    forward into a layout served by `gemv_4bit`, which has no backward: a training forward after an
    evaluation then passes no gradient through the base to the layers below it (measured on a 2-layer
    model: layer 0's LoRA gradients were None). SFT evaluates before training, so it first undoes any
    repacking and turns it off: then every forward dequantizes to the compute dtype, which autograd
    follows (bitsandbytes' MatMul4Bit), and the evaluations use the same arithmetic as training.
    """
    import bitsandbytes
    from bitsandbytes.functional import _convert_weight_packed_for_cpu_inverse

    changed = 0
    for _, module in quantized_linears(model):
        if not isinstance(module, bitsandbytes.nn.Linear4bit):
            continue
        state = module.weight.quant_state
        if getattr(state, "packing_format_for_cpu", False):
            module.weight.data, module.weight.quant_state = _convert_weight_packed_for_cpu_inverse(
                module.weight.data, state)
        changed += int(module.support_avx512bf16_for_cpu)
        module.support_avx512bf16_for_cpu = False
    return changed

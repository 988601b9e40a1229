"""Quantized base weights (ESSA's INT8/INT4 runs): a CUDA-only path, and a clear error elsewhere."""

from __future__ import annotations

import pytest
import torch

from evotune.backends.models import load_model
from evotune.errors import ConfigError
from evotune.import_utils import is_bitsandbytes_available
from helpers import requires_bitsandbytes, requires_cuda

@pytest.mark.parametrize("quantization", ["int8", "int4"])
def test_quantization_without_cuda_says_what_to_set(tiny_model_dir, quantization):
    with pytest.raises(ConfigError, match="quantization: none"):
        load_model(tiny_model_dir, "float32", "cpu", quantization)


def test_quantizing_a_gguf_file_points_to_export():
    if not torch.cuda.is_available() or not is_bitsandbytes_available():
        pytest.skip("the GGUF check comes after the CUDA and bitsandbytes checks")
    with pytest.raises(ConfigError, match="evotune export"):
        load_model("smollm2-135m-instruct", "bfloat16", "cuda", "int4")


@pytest.mark.gpu
@requires_bitsandbytes
@requires_cuda
@pytest.mark.parametrize("quantization", ["int8", "int4"])
def test_essa_step_on_quantized_base(tiny_model_dir, tmp_path, quantization):
    from evotune.config import TrainConfig
    from evotune.trainer import Trainer

    config = TrainConfig(model=tiny_model_dir, task="conciseness", space="svd_lora", strategy="cma",
                         population_size=4, sigma=0.5, lora_rank=4, lora_init="gaussian", iterations=1,
                         batch_size=4, max_new_tokens=6, num_eval=4, dtype="float16", device="cuda",
                         quantization=quantization, report_to=[])
    trainer = Trainer(config, tmp_path / "run")
    before = trainer.space.adapter_weights()
    trainer.train()
    after = trainer.space.adapter_weights()
    assert any(not torch.equal(before[key], after[key]) for key in before)
    assert (tmp_path / "run" / "final" / "adapter_config.json").exists()

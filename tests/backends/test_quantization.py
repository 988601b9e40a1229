"""Quantized base weights (ESSA's INT8/INT4 runs) with bitsandbytes, on CPU as on CUDA.

The base is a tiny random Llama 64 wide: bitsandbytes' CPU 4-bit kernel (CPUs with avx512_bf16) needs every
quantized Linear's output size to be a multiple of 32, which conftest's 16-wide model is not.
"""

from __future__ import annotations

import json
from typing import get_args

import numpy as np
import pytest
import torch
from helpers import (
    POPULATION_ROWS,
    completions_one_at_a_time,
    essa_config,
    make_task,
    requires_bitsandbytes,
    requires_cuda,
    save_tiny_llama,
)

from evotune.backends.models import load_model
from evotune.config import Int4Type, TrainConfig
from evotune.errors import ConfigError

QUANTIZATIONS = ["int8", "int4"]
MAX_NEW_TOKENS = 6


@pytest.fixture(scope="module")
def wide_model_dir(tmp_path_factory) -> str:
    """A 2-layer, 64-wide Llama (k/v 32 wide, MLP 128) with the tiny models' tokenizer: every Linear fits the CPU 4-bit
    kernel's blocks of 32 rows."""
    return save_tiny_llama(tmp_path_factory.mktemp("wide-llama"), hidden_size=64, intermediate_size=128)


# --- configuration: no bitsandbytes needed ---------------------------------------------------------------


@pytest.mark.parametrize("space", ["full", "lowrank"])
@pytest.mark.parametrize("quantization", QUANTIZATIONS)
def test_spaces_that_write_the_base_refuse_a_quantized_base(tiny_model_dir, space, quantization):
    with pytest.raises(ConfigError, match=f"`space: {space}` perturbs and updates the base weights"):
        TrainConfig(model=tiny_model_dir, space=space, strategy="openes", quantization=quantization)


@pytest.mark.parametrize("overrides, key", [
    ({"quantization": "int8", "int4_type": "fp4"}, "int4_type"),
    ({"quantization": "none", "int4_double_quantization": True}, "int4_double_quantization"),
    ({"quantization": "int8", "int4_compute_dtype": "bfloat16"}, "int4_compute_dtype"),
])
def test_int4_keys_need_int4(tiny_model_dir, overrides, key):
    with pytest.raises(ConfigError, match=f"`{key}` applies to `quantization: int4`.*set `quantization: int4`, or "
                                          f"remove `{key}`"):
        essa_config(tiny_model_dir, **overrides)


def test_sft_config_takes_the_quantization_keys(tiny_model_dir):
    from evotune.sft import load_sft_config

    config = load_sft_config(None, [f"model={tiny_model_dir}", "task=arithmetic", "quantization=int4",
                                    "int4_type=fp4", "int4_double_quantization=true"])
    assert (config.quantization, config.int4_type, config.int4_double_quantization) == ("int4", "fp4", True)
    with pytest.raises(ConfigError, match="int4_type"):
        load_sft_config(None, [f"model={tiny_model_dir}", "task=arithmetic", "int4_type=fp4"])
    with pytest.raises(ConfigError, match="quantization"):
        load_sft_config(None, [f"model={tiny_model_dir}", "task=arithmetic", "quantization=int3"])


def test_int4_types_match_the_literal():
    from evotune.backends.quantized import INT4_TYPES

    assert set(INT4_TYPES) == set(get_args(Int4Type))


def test_quantizing_a_gguf_file_points_to_export():
    with pytest.raises(ConfigError, match="evotune export"):
        load_model("smollm2-135m-instruct", "float32", "cpu", "int4")


# --- loading ---------------------------------------------------------------------------------------------


def quantized_layers(model) -> list:
    from evotune.backends.quantized import quantized_linears

    return [module for _, module in quantized_linears(model)]


@requires_bitsandbytes
@pytest.mark.parametrize("quantization", QUANTIZATIONS)
def test_quantized_base_loads_and_generates_on_cpu(wide_model_dir, quantization):
    import bitsandbytes

    from evotune.backends import HFBackend

    plain = HFBackend.load(wide_model_dir, "float32", "cpu")
    backend = HFBackend.load(wide_model_dir, "float32", "cpu", quantization=quantization)
    kind = bitsandbytes.nn.Linear8bitLt if quantization == "int8" else bitsandbytes.nn.Linear4bit
    layers = quantized_layers(backend.model)
    assert len(layers) == 2 * 7 and all(isinstance(layer, kind) for layer in layers)  # q k v o gate up down
    assert backend.device.type == "cpu"
    assert backend.model.get_memory_footprint() < plain.model.get_memory_footprint()
    completions = backend.generate([row["prompt"] for row in POPULATION_ROWS], MAX_NEW_TOKENS)
    assert len(completions) == len(POPULATION_ROWS) and all(isinstance(text, str) for text in completions)


@requires_bitsandbytes
def test_int4_choices_reach_bitsandbytes(wide_model_dir):
    from evotune.backends.quantized import QuantizationSettings

    settings = QuantizationSettings("int4", int4_type="fp4", double_quantization=True, compute_dtype="bfloat16")
    model, _ = load_model(wide_model_dir, "float32", "cpu", settings)
    layer = quantized_layers(model)[0]
    state = layer.weight.quant_state
    assert (state.quant_type, state.nested, layer.compute_dtype) == ("fp4", True, torch.bfloat16)
    default, _ = load_model(wide_model_dir, "float32", "cpu", "int4")
    layer = quantized_layers(default)[0]
    assert (layer.weight.quant_state.quant_type, layer.weight.quant_state.nested) == ("nf4", False)
    assert layer.compute_dtype == torch.float32  # the run's dtype


@requires_bitsandbytes
def test_cpu_4bit_kernel_shapes_are_checked_at_load(tiny_model_dir):
    import bitsandbytes

    from evotune.errors import ModelLoadError

    model, _ = load_model(tiny_model_dir, "float32", "cpu", "int8")  # INT8 has no such constraint
    assert quantized_layers(model)
    if not bitsandbytes.functional.has_avx512bf16():
        pytest.skip("bitsandbytes' blocked CPU 4-bit layout is used only on CPUs with avx512_bf16")
    with pytest.raises(ModelLoadError, match="out_features divisible by 32.*quantization: int8"):
        load_model(tiny_model_dir, "float32", "cpu", "int4")  # 16 wide


# --- SFT, ESSA, population batching, eval and export on a quantized base ----------------------------------


def sft_config(model_dir: str, quantization: str, **overrides):
    from evotune.sft import SFTConfig

    values = dict(model=model_dir, task="arithmetic", num_train=8, num_eval=2, batch_size=4, max_steps=2,
                  learning_rate=5e-2, lora_rank=4, max_new_tokens=4, dtype="float32", device="cpu", report_to=[],
                  quantization=quantization)
    return SFTConfig(**{**values, **overrides})


@requires_bitsandbytes
@pytest.mark.parametrize("quantization", QUANTIZATIONS)
def test_sft_on_a_quantized_base_saves_a_peft_adapter(wide_model_dir, tmp_path, quantization):
    """QLoRA-style SFT: the base stays quantized and frozen, every LoRA factor learns, adapter/ reloads with PEFT
    on the same quantized base. num_eval > 0: SFT evaluates before training, which on an avx512_bf16 CPU would
    repack 4-bit weights into a layout with no backward. After one step every B (zero at start) has moved: q/k/v's
    gradient can only have come through the frozen o_proj base weights, since o_proj's own LoRA B is still 0."""
    from safetensors.torch import load_file

    from evotune.sft import run_sft

    summary = run_sft(sft_config(wide_model_dir, quantization, max_steps=1), tmp_path / "sft")
    assert "eval_before" in summary and summary["steps"] == 1
    weights = load_file(tmp_path / "sft" / "adapter" / "adapter_model.safetensors")
    factors_b = [tensor for name, tensor in weights.items() if "lora_B" in name]
    assert len(factors_b) == 2 * 4 and all(tensor.abs().max() > 0 for tensor in factors_b)
    reloaded, _ = load_model(str(tmp_path / "sft" / "adapter"), "float32", "cpu", quantization)
    assert quantized_layers(reloaded)
    for name, tensor in reloaded.state_dict().items():
        key = name.replace(".default", "")
        if key in weights:
            assert torch.equal(tensor, weights[key]), name


@pytest.fixture(scope="module", params=QUANTIZATIONS)
def essa_run(request, wide_model_dir, tmp_path_factory):
    """One ESSA iteration (CMA-ES over an SVD'd gaussian-init adapter) on a quantized base: (run directory,
    quantization, the adapter before, the trainer)."""
    from evotune.trainer import Trainer

    run = tmp_path_factory.mktemp(f"essa-{request.param}") / "run"
    trainer = Trainer(essa_config(wide_model_dir, quantization=request.param, iterations=1, eval_every=1,
                                  checkpoint_every=1, population_batch_size=4,
                                  eval_max_new_tokens=MAX_NEW_TOKENS), run)  # the budget eval below uses
    before = trainer.space.adapter_weights()
    trainer.train()
    return run, request.param, before, trainer


@requires_bitsandbytes
def test_essa_iteration_changes_the_singular_values(essa_run):
    run, quantization, before, trainer = essa_run
    assert quantized_layers(trainer.backend.model)
    offsets = trainer.space.mean_vector()  # CMA-ES's mean: offsets to the SVD'd adapter's singular values
    assert offsets.shape == (trainer.space.dimension,) and np.abs(offsets).max() > 0
    after = trainer.space.adapter_weights()
    assert any(not torch.equal(before[key], after[key]) for key in before)
    # final/ is a PEFT adapter that loads on the quantized base and holds the evolved weights
    model, _ = load_model(str(run / "final"), "float32", "cpu", quantization)
    assert quantized_layers(model)
    state = {name.replace(".default", ""): tensor for name, tensor in model.state_dict().items()}
    for key, tensor in after.items():
        assert torch.equal(state[key], tensor), key


@requires_bitsandbytes
def test_eval_uses_the_runs_quantized_base(essa_run, tmp_path):
    from evotune.cli.main import main

    run, quantization, _, _ = essa_run
    output = tmp_path / "eval.json"
    assert main(["eval", "--model", str(run), "--model", str(run / "checkpoint"), "--task", "conciseness",
                 "--num-eval", "4", "--max-new-tokens", str(MAX_NEW_TOKENS), "--dtype", "float32",
                 "--output", str(output)]) == 0
    final, checkpoint = json.loads(output.read_text())
    assert final["quantization"] == checkpoint["quantization"] == quantization
    last_eval = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][-1]
    assert final["reward"] == checkpoint["reward"] == pytest.approx(last_eval["eval/reward"])
    assert main(["eval", "--model", str(run), "--quantization", "none", "--task", "conciseness", "--num-eval", "4",
                 "--max-new-tokens", str(MAX_NEW_TOKENS), "--dtype", "float32", "--output", str(output)]) == 0
    assert json.loads(output.read_text())[0]["quantization"] == "none"


@requires_bitsandbytes
def test_export_writes_the_quantized_runs_adapter(essa_run, tmp_path):
    from safetensors.torch import load_file

    from evotune.runs.export import export_model

    run, _, _, _ = essa_run
    export_model(str(run / "checkpoint"), str(tmp_path / "adapter"))
    exported = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    final = load_file(run / "final" / "adapter_model.safetensors")
    assert exported.keys() == final.keys() and all(torch.equal(exported[key], final[key]) for key in final)
    export_model(str(run), str(tmp_path / "merged"), merge=True)  # folded into the float32 base
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    assert merged.model.layers[0].self_attn.q_proj.weight.dtype == torch.float32


@requires_bitsandbytes
@pytest.mark.parametrize("quantization", QUANTIZATIONS)
def test_population_batched_equals_one_at_a_time_on_a_quantized_base(wide_model_dir, quantization):
    """Candidates batched over one quantized base forward give the completions of applying each alone."""
    from evotune.backends import HFBackend
    from evotune.distributed import BatchedEvaluator, LocalEvaluator
    from evotune.spaces.lora import init_lora_adapter
    from evotune.spaces.svd_lora import SVDLoRASpace

    backend = HFBackend.load(wide_model_dir, "float32", "cpu", quantization=quantization)
    backend.model = init_lora_adapter(backend.model, rank=8, init="gaussian", seed=3)
    space = SVDLoRASpace(backend.model, alpha=0.5)
    rng = np.random.default_rng(5)
    candidates = [space.mean_vector() + rng.normal(0.0, 2.0, space.dimension) for _ in range(5)]
    prompts = [row["prompt"] for row in POPULATION_ROWS]
    alone = completions_one_at_a_time(space, backend, candidates, prompts, MAX_NEW_TOKENS)
    assert len({tuple(texts) for texts in alone}) > 1, "candidates must differ for the comparison to mean anything"
    batched = backend.generate_population(prompts, MAX_NEW_TOKENS, space.factors, space.candidate_factors(candidates))
    assert batched == alone
    task = make_task()
    expected = LocalEvaluator(space, backend, task, MAX_NEW_TOKENS).evaluate(candidates, POPULATION_ROWS)
    rewards = BatchedEvaluator(space, backend, task, MAX_NEW_TOKENS, 3).evaluate(candidates, POPULATION_ROWS)
    assert np.array_equal(rewards, expected)


@pytest.mark.gpu
@requires_bitsandbytes
@requires_cuda
@pytest.mark.parametrize("quantization", QUANTIZATIONS)
def test_essa_step_on_a_quantized_base_on_cuda(wide_model_dir, tmp_path, quantization):
    from evotune.trainer import Trainer

    trainer = Trainer(essa_config(wide_model_dir, iterations=1, dtype="float16", device="cuda",
                                  quantization=quantization, population_batch_size=4), tmp_path / "run")
    before = trainer.space.adapter_weights()
    trainer.train()
    after = trainer.space.adapter_weights()
    assert any(not torch.equal(before[key], after[key]) for key in before)
    assert (tmp_path / "run" / "final" / "adapter_config.json").exists()

"""What one iteration of a run does, counted from its config and its model's shape alone: the copies of the weights
it holds, the sequences whose KV cache it holds at once, the tokens it runs forward (and backward), the passes over
every weight, the cached positions its decode steps attend over and the full-vocabulary distributions it computes.
estimate.py turns these counts into MiB and seconds with coefficients fitted on the scaling study's measured cells.
(A per-iteration constant and a term for ES's per-parameter noise and update sweeps were fitted at 0 on the study's
cells, whose decode reads of the weights already grow with the population, and are not counted.)

Counted for the hf backend, as each method runs there (config/train.py's `population_batch_size`): full-es one
candidate at a time (or `population_batch_size` stacked copies), lora-es and ESSA one adapter at a time,
lowrank-es the whole population in one batched generate; GRPO (TRL) one batched generate of every completion, then
forward and backward passes in `gradient_accumulation_steps` micro-batches; SFT one forward and backward per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .shape import ModelShape

BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
MIB = 2**20
# Bytes per weight of a bitsandbytes-quantized Linear layer: LLM.int8 (plus a float32 scale per row, negligible);
# NF4/FP4 half a byte plus a float32 absmax per block of 64 (double quantization stores those in 8 bits instead).
QUANTIZED_BYTES = {"int8": 1.0, "int4": 0.5 + 4 / 64}


@dataclass(frozen=True)
class Workload:
    method: str  # what the run is, in words
    command: str  # train, grpo or sft
    dtype_bytes: int
    parameters: int  # the model's
    trained: int  # parameters the method changes: all (full, low-rank, GRPO full) or the adapter's
    members: int  # ES candidates per iteration (1 for GRPO and SFT)
    passes: int  # forward passes over every weight, one after another, per iteration (decode steps and prefills)
    weight_reads: int  # copies of the weights read per iteration (passes x stacked copies)
    kv_sequences: int  # sequences whose KV cache is held at once
    sequence_tokens: int  # prompt + completion tokens of one sequence
    forward_tokens: int  # tokens run forward per iteration (generation and training passes)
    trained_sequences: int  # sequences in one forward-and-backward micro-batch (0: no backward)
    trained_tokens: int  # tokens run forward and backward per iteration
    training_flops_per_token: int = 0  # per parameter: 6 when every weight gets a gradient, 4 through a LoRA
    fp32_master: bool = False  # full and lowrank-es: the exact mean in float32 beside the weights
    drift_copy: bool = False  # log_drift: the starting weights kept in their own dtype
    stacked_copies: int = 0  # full-es with population_batch_size: one perturbed copy per batched candidate
    optimizer_bytes_per_trained: int = 0  # fp32 gradients and optimizer moments per trained parameter
    # tokens whose whole next-token distribution is computed and processed in float32 beyond an argmax: GRPO's sampled
    # tokens and the log-probabilities its loss takes, SFT's cross-entropy (ES generates greedily: an argmax each).
    # Without it GRPO's steps at 135M were a third under the fit of every other cell (bench/scaling/fit.py --drop)
    distribution_tokens: int = 0
    quantized: int = 0  # weights of the Linear layers a quantized base stores in quantized_bytes each (embeddings stay)
    quantized_bytes: float = 0.0
    new_tokens: int = 0  # tokens each decode generates (max_new_tokens): its steps attend over prompt + half of them
    adapter: bool = False  # a LoRA's two extra matmuls per target module and layer pass (lora-es, ESSA, GRPO, SFT)


def quantized_weights(config: Any, shape: ModelShape) -> dict[str, Any]:
    """Workload fields of a base quantized by bitsandbytes (`quantization: int8 | int4`): the decoder's Linear weights
    at their quantized size; {} for an unquantized base."""
    method = getattr(config, "quantization", "none")
    if method == "none":
        return {}
    hidden, kv = shape.hidden_size, shape.num_key_value_heads * shape.head_dim
    linear = shape.num_hidden_layers * (2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * shape.intermediate_size)
    return {"quantized": linear, "quantized_bytes": QUANTIZED_BYTES[method]}


def es_workload(config: Any, shape: ModelShape, prompt_tokens: int, dtype: str) -> Workload:
    """An `evotune train` run (hf backend) per iteration."""
    parameters, new = shape.parameters(), config.max_new_tokens
    adapter = shape.lora_parameters(config.lora_rank, config.lora_target_modules)
    members, prompts = config.population_size, config.batch_size
    chunk = config.generation_batch_size or prompts
    calls = math.ceil(prompts / chunk)  # generate() calls per candidate
    space = config.space
    together = members if space == "lowrank" else 1  # candidates in one batched generate
    stacked = 0
    if space == "full" and isinstance(config.population_batch_size, int) and config.population_batch_size > 1:
        together = stacked = min(config.population_batch_size, members)
    passes = math.ceil(members / together) * calls * new
    weight_reads = passes * max(stacked, 1)
    trained = adapter if space in ("lora", "svd_lora") else parameters
    optimizer = 8 if config.optimizer == "adam" else 0
    return Workload(
        method=f"ES ({space} space, {config.strategy})", command="train", dtype_bytes=BYTES[dtype],
        parameters=parameters, trained=trained, members=members, passes=passes, weight_reads=weight_reads,
        kv_sequences=min(chunk, prompts) * together, sequence_tokens=prompt_tokens + new,
        forward_tokens=members * prompts * (prompt_tokens + new), trained_sequences=0, trained_tokens=0,
        fp32_master=space in ("full", "lowrank"), drift_copy=space in ("full", "lowrank") and config.log_drift,
        stacked_copies=stacked, optimizer_bytes_per_trained=optimizer, new_tokens=new,
        adapter=space in ("lora", "svd_lora"), **quantized_weights(config, shape))


def grpo_workload(config: Any, shape: ModelShape, prompt_tokens: int, dtype: str) -> Workload:
    """An `evotune grpo` step: one batched generate of every completion, then forward and backward in micro-batches."""
    parameters, new = shape.parameters(), config.max_new_tokens
    completions = config.batch_size * config.num_generations
    trained = shape.lora_parameters(config.lora_rank, config.lora_target_modules) if config.lora else parameters
    length = prompt_tokens + new
    return Workload(
        method=f"GRPO ({'LoRA' if config.lora else 'full-parameter'})", command="grpo",
        dtype_bytes=BYTES[dtype], parameters=parameters, trained=trained, members=1, passes=new,
        weight_reads=new, kv_sequences=completions, sequence_tokens=length,
        forward_tokens=completions * length, trained_sequences=completions // config.gradient_accumulation_steps,
        trained_tokens=completions * length, training_flops_per_token=4 if config.lora else 6,
        optimizer_bytes_per_trained=12 if not config.lora else 16,  # fp32 gradient + AdamW's two moments (+ fp32 LoRA)
        distribution_tokens=completions * new + completions * length, new_tokens=new, adapter=bool(config.lora),
        **quantized_weights(config, shape))


def sft_workload(config: Any, shape: ModelShape, prompt_tokens: int, dtype: str,
                 sequence_tokens: int | None = None) -> Workload:
    """An `evotune sft` step: one forward and backward of `batch_size` prompt + completion sequences (LoRA), each
    batch padded to its longest: `sequence_tokens` where the data was read, else the prompt and the whole
    `max_new_tokens` (an upper bound: SFT trains on the data's completions, not generated ones)."""
    length = sequence_tokens or prompt_tokens + config.max_new_tokens
    return Workload(
        method="LoRA SFT", command="sft", dtype_bytes=BYTES[dtype], parameters=shape.parameters(),
        trained=shape.lora_parameters(config.lora_rank, config.lora_target_modules), members=1, passes=0,
        weight_reads=0, kv_sequences=0, sequence_tokens=length, forward_tokens=0,
        trained_sequences=config.batch_size, trained_tokens=config.batch_size * length, training_flops_per_token=4,
        optimizer_bytes_per_trained=16, distribution_tokens=config.batch_size * length, adapter=True,
        **quantized_weights(config, shape))


def workload(command: str, config: Any, shape: ModelShape, prompt_tokens: int, dtype: str | None = None,
             sequence_tokens: int | None = None) -> Workload:
    """An iteration of `evotune COMMAND` with `config` on `shape` (`dtype`: the config's, resolved if it is auto;
    `sequence_tokens`: SFT's padded prompt + completion length, measured on its data)."""
    if command == "sft":
        return sft_workload(config, shape, prompt_tokens, dtype or config.dtype, sequence_tokens)
    counter = {"train": es_workload, "grpo": grpo_workload}[command]
    return counter(config, shape, prompt_tokens, dtype or config.dtype)


def memory_terms(load: Workload, shape: ModelShape) -> dict[str, float]:
    """MiB of each term of the peak, as counted (estimate.py scales each by its fitted coefficient)."""
    weights = ((load.parameters - load.quantized) * load.dtype_bytes + load.quantized * load.quantized_bytes) / MIB
    kv = 2 * shape.num_hidden_layers * shape.num_key_value_heads * shape.head_dim * load.dtype_bytes / MIB
    found = {"runtime": 1.0, "GRPO runtime": 1.0 if load.command == "grpo" else 0.0, "weights": weights,
             "fp32 master copy": load.trained * 4 / MIB if load.fp32_master else 0.0,
             "drift copy": load.trained * load.dtype_bytes / MIB if load.drift_copy else 0.0,
             "stacked candidates": load.stacked_copies * weights,
             "KV cache": kv * load.kv_sequences * load.sequence_tokens,
             "optimizer state": load.trained * load.optimizer_bytes_per_trained / MIB,
             # float32 tensors autograd saves per token and layer (coefficient: how many such sets)
             "activations": load.trained_sequences * load.sequence_tokens * saved_per_token_and_layer(shape)
             * shape.num_hidden_layers * 4 / MIB,
             "logits": load.trained_sequences * load.sequence_tokens * shape.vocab_size * 4 / MIB}
    return found


def saved_per_token_and_layer(shape: ModelShape) -> int:
    """Elements a decoder layer keeps for its backward pass per token: about eight hidden-size tensors (the norms'
    inputs and outputs, queries, the attention output, residuals), the keys and values, and four MLP-width tensors
    (the gate's output, its activation, the up projection, their product). Counted in hidden sizes alone, Qwen2.5's
    MLP, 5.4 hidden sizes wide against SmolLM2's 2.7, made GRPO's peak at Qwen2.5-0.5B a fifth under the fit."""
    kv = shape.num_key_value_heads * shape.head_dim
    return 8 * shape.hidden_size + 2 * kv + 4 * shape.intermediate_size

"""A cell's peak memory predicted before it runs, so that a cell predicted not to fit is recorded as "predicted not to
fit" instead of being started: `evotune estimate`'s fitted model (evotune.estimate, counted as bench/scaling/fit.py
counts a cell) for every arm it models (evotune's and plain generation) once it is fitted on cells of three model
sizes, and first principles (the copies of the weights an arm holds, its KV cache, its training activations and
logits, a fixed runtime) for the peer, which it does not model, and before that fit. The guard stops a cell that the
prediction let through and that does not fit, and the cell runs again smaller (cell.py).
"""

from __future__ import annotations

from .arms import ARMS, GRPO_GENERATIONS, MAX_NEW_TOKENS, PROMPTS, SFT_BATCH, unit
from .shapes import TOKENIZER_VOCAB, Shape

RUNTIME_MIB = 700.0  # python, torch, transformers and a tokenizer, before any weight (the method study's probes)
PROMPT_TOKENS = 60  # the arithmetic task's chat-templated prompt
# saved activations per token, per layer, in hidden-size units (attention, MLP, TRL's logprob passes): set so that
# grpo-lora at 135M, 8 x 8 completions, comes to the method study's memory probe (16,454 MiB)
ACTIVATION_FACTOR = 28
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def terms(shape: Shape, arm: str, dtype: str, fraction: float = 1.0) -> dict[str, float]:
    """MiB per term of an arm's peak on a shape (`fraction`: of the unit of work, where a cell runs less of it)."""
    command, keys = ARMS[arm]["command"], ARMS[arm]["keys"]
    members, prompts = unit(arm, fraction).get("members", 0), unit(arm, fraction).get("prompts", 0)
    size, parameters = BYTES[dtype], shape.parameters()
    mib = 2**20
    weights = parameters * size / mib
    length = PROMPT_TOKENS + MAX_NEW_TOKENS
    kv_per_sequence = 2 * shape.num_hidden_layers * shape.num_key_value_heads * shape.head_dim * length * size / mib
    found = {"runtime": RUNTIME_MIB, "weights": weights}
    if command in ("train", "generate"):
        in_flight = members * PROMPTS if keys.get("population_batch_size") or keys.get("space") == "lowrank" \
            else PROMPTS
        found["kv_cache"] = kv_per_sequence * in_flight
    if keys.get("space") in ("full", "lowrank"):
        found["fp32_master"] = parameters * 4 / mib
        if keys.get("log_drift", True):
            found["fp32_drift_copy"] = parameters * 4 / mib
    if keys.get("population_batch_size"):
        found["stacked_candidates"] = members * weights
    if command == "peer":  # the base clone, every member's noise and every member's perturbed copy, materialized
        found["population_copies"] = (1 + 2 * members) * weights
        found["kv_cache"] = kv_per_sequence * PROMPTS
    if command in ("grpo", "sft"):
        sequences = max(1, prompts * GRPO_GENERATIONS // keys.get("gradient_accumulation_steps", 1)) \
            if command == "grpo" else SFT_BATCH
        found["activations"] = sequences * length * shape.hidden_size * shape.num_hidden_layers \
            * ACTIVATION_FACTOR * 4 / mib
        found["logits"] = 2 * sequences * length * TOKENIZER_VOCAB * 4 / mib  # fp32 logits and their softmax
        if command == "grpo":
            found["kv_cache"] = kv_per_sequence * prompts * GRPO_GENERATIONS
        if not keys.get("lora", command == "sft"):  # every weight trained: fp32 gradients and AdamW's two moments
            found["gradients_and_adamw"] = 3 * parameters * 4 / mib
    return {name: round(value, 1) for name, value in found.items()}


def fitted_terms(shape: Shape, arm: str, dtype: str, fraction: float = 1.0) -> dict[str, float] | None:
    """`evotune estimate`'s memory terms (MiB) for a cell of an arm the fit models (workloads.FITTED: evotune's
    commands and plain generation); None for the peer (not ours) and while the fit covers fewer than three model
    sizes (its per-parameter terms are not told apart)."""
    from evotune.estimate.model import estimate, load_coefficients

    from .workloads import FITTED, cell_workload

    coefficients = load_coefficients()
    if ARMS[arm]["command"] not in FITTED or len(coefficients.get("shapes", [])) < 3:
        return None
    record = {"arm": arm, "shape": shape.name, "fraction_of_unit": fraction, "dtype": dtype,
              "unit": unit(arm, fraction)}
    found = estimate(cell_workload(record), shape.model_shape(), coefficients).memory_mib
    return {name: round(value, 1) for name, value in found.items() if value}


def predicted_terms(shape: Shape, arm: str, dtype: str, fraction: float = 1.0) -> tuple[str, dict[str, float]]:
    """What predicts a cell's peak (the fitted estimate where it models the arm, else first principles) and its
    terms in MiB."""
    fitted = fitted_terms(shape, arm, dtype, fraction)
    return ("evotune estimate", fitted) if fitted is not None else ("first principles",
                                                                    terms(shape, arm, dtype, fraction))


def predicted_peak_mib(shape: Shape, arm: str, dtype: str, fraction: float = 1.0) -> float:
    return round(sum(predicted_terms(shape, arm, dtype, fraction)[1].values()), 1)

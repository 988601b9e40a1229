"""The scaling study's arms, each at the same work per cell on every shape (the method study's work units):

- ES arms: 16 members x 8 prompts x 48 new tokens per iteration (6,144 candidate-tokens);
- GRPO arms: 8 prompts x 8 sampled completions x 48 new tokens per step (3,072 completion-tokens);
- LoRA SFT: 8 sequences per step;
- plain generation: the ES iteration's 16 x 8 prompts x 48 tokens with no perturbation, the pure-inference reference
  every ES arm's speed is a fraction of;
- the peer: the loop a user would write with torcheggroll (peer.py) at the ES arms' work.

Every model forces its completions to 48 tokens (shapes.build), so no arm's work is cut short by an early end of
sequence. Each arm runs ITERATIONS steps; a cell's time is the median of the steps after the first.

A cell may run a fraction of the unit (fewer ES members, fewer GRPO prompts; SFT's 8 sequences stay), and its
record says so: a half above 250M parameters and a quarter above 1B, so that a 2-core CPU runs a large shape's cell
in minutes, not an hour (a forward pass's cost per token does not depend on how many members follow it), and a
smaller fraction again where the whole is predicted not to fit in memory. Seconds per candidate-token and per
completion-token are the figures compared across cells.
"""

from __future__ import annotations

from typing import Any

MAX_NEW_TOKENS = 48
MEMBERS, PROMPTS = 16, 8  # ES: candidates x prompts per candidate
GRPO_PROMPTS, GRPO_GENERATIONS = 8, 8
SFT_BATCH = 8
ITERATIONS = 3  # the first step warms caches up; the median of the other two is the cell's time
LORA = {"lora_rank": 8, "lora_alpha": 16.0, "lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
COMMON = {"task": "arithmetic", "max_new_tokens": MAX_NEW_TOKENS, "iterations": ITERATIONS, "report_to": [],
          "seed": 0}
# ES: evaluation on one batch of the same 8 prompts (a larger held-out batch would set the peak, not the method)
ES = {**COMMON, "population_size": MEMBERS, "batch_size": PROMPTS, "num_eval": PROMPTS, "eval_every": 0,
      "log_samples": 0, "checkpoint_every": 100000, "noise": "rademacher", "antithetic": True}
GRPO = {**COMMON, "batch_size": GRPO_PROMPTS, "num_generations": GRPO_GENERATIONS, "num_eval": PROMPTS,
        "temperature": 0.7, "beta": 0.0, "checkpoint_every": 100000}

# name: (command, keys, label, short: the label within a sentence (no commas), what a unit of its work is). command
# "generate" and "peer" run in cell.py itself.
ARMS: dict[str, dict[str, Any]] = {
    "generation": {"command": "generate", "label": "plain generation (pure inference)", "short": "plain generation",
                   "keys": {}},
    "full_es": {"command": "train", "label": "full-es, one candidate at a time", "short": "full-es",
                "keys": {**ES, "space": "full", "sigma": 2e-3, "learning_rate": 8e-3}},
    "full_es_batched": {"command": "train", "label": "full-es, population-batched",
                        "short": "population-batched full-es",
                        "keys": {**ES, "space": "full", "sigma": 2e-3, "learning_rate": 8e-3,
                                 "population_batch_size": MEMBERS}},
    "lowrank": {"command": "train", "label": "lowrank-es", "short": "lowrank-es",
                "keys": {**ES, "space": "lowrank", "perturbation_rank": 1, "sigma": 2e-3, "learning_rate": 1.6e-2}},
    "es_lora": {"command": "train", "label": "lora-es", "short": "lora-es",
                "keys": {**ES, **LORA, "space": "lora", "sigma": 1e-2, "learning_rate": 4e-2}},
    "essa": {"command": "train", "label": "essa (its evolution, on a rank-8 adapter)", "short": "essa",
             "keys": {**ES, "space": "svd_lora", "strategy": "cma", "singular_value_fraction": 0.5, "sigma": 0.04,
                      "antithetic": False, "noise": "gaussian"}},
    "grpo_lora": {"command": "grpo", "label": "grpo-lora", "short": "grpo-lora",
                  "keys": {**GRPO, **LORA, "lora": True, "learning_rate": 1e-3}},
    "grpo_full": {"command": "grpo", "label": "grpo-full", "short": "grpo-full",
                  "keys": {**GRPO, "lora": False, "learning_rate": 3e-5}},
    "grpo_full_accumulation4": {"command": "grpo", "label": "grpo-full, gradient_accumulation_steps 4",
                                "short": "grpo-full with accumulation 4",
                                "keys": {**GRPO, "lora": False, "learning_rate": 3e-5,
                                         "gradient_accumulation_steps": 4}},
    "sft_lora": {"command": "sft", "label": "sft (on a LoRA)", "short": "sft",
                 "keys": {"task": "arithmetic", "max_new_tokens": MAX_NEW_TOKENS, "batch_size": SFT_BATCH,
                          "max_steps": ITERATIONS, "num_train": SFT_BATCH * ITERATIONS, "num_eval": PROMPTS,
                          "report_to": [], "checkpoint_every": 0, **LORA}},
    "peer_torcheggroll": {"command": "peer",
                          "label": "peer: torcheggroll 0.2.0 (EGGROLL's low-rank ES) around generate()",
                          "short": "the peer (torcheggroll)",
                          "keys": {}},
}


FRACTIONS = (1.0, 0.5, 0.25, 0.125)  # of the unit: ES members 16, 8, 4, 2; GRPO prompts 8, 4, 2, 1


def time_fraction(parameters: int) -> float:
    """The largest fraction of the unit a cell runs at a shape this large (the rest of the cell's unit is time the
    study would spend repeating the same forward passes)."""
    return 1.0 if parameters < 250e6 else 0.5 if parameters < 1e9 else 0.25


def unit(arm: str, fraction: float) -> dict[str, int]:
    """An arm's work at a fraction of the unit: ES members (and plain generation's generates), GRPO prompts."""
    command = ARMS[arm]["command"]
    if command in ("train", "generate", "peer"):
        return {"members": round(MEMBERS * fraction)}
    if command == "grpo":
        return {"prompts": round(GRPO_PROMPTS * fraction)}
    return {}


def tokens_per_iteration(arm: str, fraction: float = 1.0) -> int:
    """New tokens an arm generates per iteration (SFT: tokens are read, not generated: 0)."""
    sizes = unit(arm, fraction)
    if "members" in sizes:
        return sizes["members"] * PROMPTS * MAX_NEW_TOKENS
    if "prompts" in sizes:
        return sizes["prompts"] * GRPO_GENERATIONS * MAX_NEW_TOKENS
    return 0

"""What a scaling cell runs, counted: its config keys (cell.py runs them) and its workload as `evotune estimate`
counts a user's run (fit.py fits on them, predict.py predicts a cell's peak with them). Below cell, predict and fit,
so none of them imports another to reach these.
"""

from __future__ import annotations

from typing import Any

from evotune.estimate.report import sft_sequence_tokens
from evotune.estimate.shape import ModelShape
from evotune.estimate.workload import BYTES, Workload, workload

from .arms import ARMS, ITERATIONS, MAX_NEW_TOKENS, PROMPTS, unit
from .shapes import SHAPES

PROMPT_TOKENS = 47  # the arithmetic task's chat-templated prompt under SmolLM2's tokenizer (every shape's here)
FITTED = ("generate", "train", "grpo", "sft")  # the commands the estimate models (plain generation, its reference)


def cell_keys(arm: str, fraction: float, iterations: int = ITERATIONS) -> dict[str, Any]:
    """The config keys an evotune arm's cell runs with at a fraction of the unit (model, dtype and ESSA's adapter
    aside: command_line adds them)."""
    command, sizes = ARMS[arm]["command"], unit(arm, fraction)
    keys = dict(ARMS[arm]["keys"])
    if command == "sft":
        keys.update(max_steps=iterations, num_train=keys["batch_size"] * iterations)
    else:
        keys["iterations"] = iterations
    if command == "train":
        keys["population_size"] = sizes["members"]
        if keys.get("population_batch_size"):
            keys["population_batch_size"] = sizes["members"]
    if command == "grpo":
        keys["batch_size"] = sizes["prompts"]
        # micro-batches must divide the step's completions: fewer prompts may take fewer of them
        keys["gradient_accumulation_steps"] = min(keys.get("gradient_accumulation_steps", 1),
                                                  sizes["prompts"] * keys["num_generations"])
    return keys


def model_shape(name: str) -> ModelShape:
    return SHAPES[name].model_shape()


def cell_workload(record: dict[str, Any]) -> Workload:
    """What the cell ran, counted as `evotune estimate` counts a user's run."""
    from evotune.config.grpo import GRPORunConfig
    from evotune.config.sft import SFTConfig
    from evotune.config.train import TrainConfig

    arm, shape = record["arm"], model_shape(record["shape"])
    command = ARMS[arm]["command"]
    if command == "generate":  # the ES iteration's generates with no perturbation: no master, no sweeps
        members = record["unit"]["members"]
        parameters = shape.parameters()
        return Workload("plain generation", "generate", BYTES[record["dtype"]], parameters, 0, members,
                        members * MAX_NEW_TOKENS, members * MAX_NEW_TOKENS, PROMPTS, PROMPT_TOKENS + MAX_NEW_TOKENS,
                        members * PROMPTS * (PROMPT_TOKENS + MAX_NEW_TOKENS), 0, 0, new_tokens=MAX_NEW_TOKENS)
    keys = {**cell_keys(arm, record["fraction_of_unit"]), "dtype": record["dtype"]}
    config = {"train": TrainConfig, "grpo": GRPORunConfig, "sft": SFTConfig}[command].from_dict(keys)
    # SFT trains on the task's solutions, padded per batch: measured as `evotune estimate` measures a user's data
    sequence = sft_sequence_tokens(config)[0] if command == "sft" else None
    return workload(command, config, shape, PROMPT_TOKENS, sequence_tokens=sequence)

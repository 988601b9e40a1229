"""The method matrix's arms: each method's fixed settings, its tuning grid, and the tasks.

Every method gets the same tuning budget (TUNING_SETTINGS settings x 1 seed x the same training time), scored on
the run's own validation split (its `num_eval` questions, never the held-out set `measure.py` draws), and the
best setting then runs on every seed. The settings and the grids are data here, recorded in each result file.
"""

from __future__ import annotations

import os
from typing import Any

# equal wall time of training per run (evaluation excluded), one CPU thread; METHOD_MATRIX_SECONDS shortens it
# for a smoke run of the machinery (such results are written elsewhere, never under bench/results)
TRAINING_SECONDS = float(os.environ.get("METHOD_MATRIX_SECONDS", 600))
THREADS = 1
DTYPE = "float32"  # one dtype for every arm, GRPO's full-parameter AdamW included
TUNING_SEED = 10  # no main run uses it
TUNING_SETTINGS = 4
MAX_NEW_TOKENS = 48  # the quickstart's: arithmetic answers are scored whole (measure.py checks growing budgets)
VALIDATION_SIZE = 256  # the tuning runs' validation split (the run's own held-out rows, `num_eval`)
MAIN_NUM_EVAL = 64  # main runs are scored on measure.py's held-out set; their own split only logs a curve

# Per task: seeds of the main runs, the task's keys, and whether every method starts from an SFT warm start
# (countdown: the base model almost never writes the <answer> format, so all methods start from the same SFT).
TASKS: dict[str, dict[str, Any]] = {
    "arithmetic": {"seeds": [0, 1, 2, 3, 4], "keys": {"task": "arithmetic"}, "warm_start": False},
    "countdown": {"seeds": [0, 1, 2], "warm_start": True,
                  "keys": {"task": "countdown",
                           "task_args": {"min_numbers": 3, "max_numbers": 3, "max_number": 20, "max_target": 50}}},
}
TRANSFER_TASK = "arithmetic"  # the one task of the study with a transfer split (measure.transfer_split)


def main_path(task: str, method: str, seed: int) -> str:
    """A main run's result file, relative to the study's results."""
    return f"main/{task}/{method}/seed{seed}.json"


def rerun_path(task: str, method: str, seed: int) -> str:
    """The result file of a main run trained again for the transfer split (run.py's reruns, transfer.py's rows)."""
    return f"transfer/{main_path(task, method, seed)}"

# METHOD_MATRIX_MODEL: another model for a dry run of the machinery (the slow test of test_method_matrix.py)
MODEL = os.environ.get("METHOD_MATRIX_MODEL", "smollm2-135m-instruct")
COMMON = {"model": MODEL, "dtype": DTYPE, "max_new_tokens": MAX_NEW_TOKENS,
          "num_eval": VALIDATION_SIZE, "eval_every": 0, "report_to": [], "iterations": 100000,
          "max_training_seconds": TRAINING_SECONDS}
ES = {"antithetic": True, "noise": "rademacher", "checkpoint_every": 100000, "log_drift": False}
LORA = {"lora_rank": 8, "lora_alpha": 16.0, "lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
SFT = {"num_train": 300, "epochs": 1, "batch_size": 8, "learning_rate": 5e-4, **LORA}

# command: train (evotune train), grpo (evotune grpo); essa trains after an SFT whose time it is charged
# (on countdown every method starts from that SFT, and no one is charged).
METHODS: dict[str, dict[str, Any]] = {
    "full_es": {
        "label": "full-es", "command": "train",
        "keys": {**ES, "space": "full", "population_size": 16, "batch_size": 16},
        # the quickstart's settings first; at one thread an iteration takes ~3 minutes, so half the prompts per
        # member (twice the iterations) is a setting too
        "grid": [{"sigma": 2e-3, "learning_rate": 8e-3}, {"sigma": 2e-3, "learning_rate": 1.6e-2},
                 {"sigma": 2e-3, "learning_rate": 8e-3, "batch_size": 8},
                 {"sigma": 2e-3, "learning_rate": 1.6e-2, "batch_size": 8}]},
    "es_lora": {
        "label": "lora-es", "command": "train",
        # GRPO's LoRA: rank 8 on q/k/v/o, a fresh adapter (B = 0), every entry of A and B searched
        "keys": {**ES, **LORA, "space": "lora", "population_size": 16, "batch_size": 16},
        "grid": [{"sigma": 1e-2, "learning_rate": 4e-2}, {"sigma": 3e-2, "learning_rate": 1.2e-1},
                 {"sigma": 1e-2, "learning_rate": 4e-2, "batch_size": 8},
                 {"sigma": 3e-2, "learning_rate": 1.2e-1, "batch_size": 8}]},
    "lowrank": {
        "label": "lowrank-es", "command": "train",
        "keys": {**ES, "space": "lowrank", "perturbation_rank": 1, "population_size": 64, "batch_size": 4},
        "grid": [{"sigma": 2e-3, "learning_rate": 4e-3}, {"sigma": 2e-3, "learning_rate": 8e-3},
                 {"sigma": 2e-3, "learning_rate": 1.6e-2}, {"sigma": 4e-3, "learning_rate": 1.6e-2}]},
    "essa": {
        "label": "essa (SFT + ES)", "command": "essa",  # its SFT is a backward pass: named as such wherever it is
        "keys": {**ES, "antithetic": False, "noise": "gaussian", "space": "svd_lora", "strategy": "cma",
                 "singular_value_fraction": 0.5, "population_size": 24, "batch_size": 16},
        "grid": [{"svd_offsets": "absolute", "sigma": 0.02},
                 {"svd_offsets": "absolute", "sigma": 0.02, "batch_size": 8},
                 {"svd_offsets": "absolute", "sigma": 0.04, "batch_size": 8},
                 {"svd_offsets": "relative", "sigma": 0.2, "batch_size": 8}]},
    "mezo": {
        "label": "mezo", "command": "train",
        # MeZO (Malladi et al. 2023): full-parameter, one antithetic pair per step, the raw reward difference, SGD;
        # the paper's eps 1e-3 and its two step sizes (eta 1e-6, 1e-7 = learning_rate 1e-3, 1e-4 here), then two
        # larger ones: a difference of two 16-prompt accuracies is small, and the paper's grid was set on losses
        "keys": {**ES, "method": "mezo", "space": "full", "population_size": 2, "fitness_shaping": "none",
                 "noise": "gaussian", "optimizer": "sgd", "batch_size": 16, "sigma": 1e-3},
        "grid": [{"learning_rate": 1e-3}, {"learning_rate": 1e-4}, {"learning_rate": 1e-2}, {"learning_rate": 3e-2}]},
    "grpo_lora": {
        "label": "grpo-lora", "command": "grpo",
        "keys": {**LORA, "lora": True, "batch_size": 8, "num_generations": 8, "temperature": 0.7, "beta": 0.0,
                 "checkpoint_every": 100000},
        "grid": [{"learning_rate": 3e-5}, {"learning_rate": 1e-4}, {"learning_rate": 3e-4}, {"learning_rate": 1e-3}]},
    "grpo_full": {
        "label": "grpo-full", "command": "grpo",
        "keys": {"lora": False, "batch_size": 8, "num_generations": 8, "temperature": 0.7, "beta": 0.0,
                 "checkpoint_every": 100000},
        "grid": [{"learning_rate": 3e-6}, {"learning_rate": 1e-5}, {"learning_rate": 3e-5}, {"learning_rate": 1e-4}]},
}
assert all(len(method["grid"]) == TUNING_SETTINGS for method in METHODS.values())

# Adapter methods start from the SFT adapter on a warm-start task, full-parameter methods from it merged.
ADAPTER_METHODS = ("es_lora", "essa", "grpo_lora")


def run_keys(method: str, task: str, setting: dict[str, Any], seed: int, phase: str = "tune") -> dict[str, Any]:
    """The config keys of one run (without the warm start's model or adapter, which the job adds)."""
    keys = {**COMMON, **TASKS[task]["keys"], **METHODS[method]["keys"], **setting, "seed": seed}
    if phase in ("main", "rerun"):  # rerun: a main run trained again (run.py's reruns)
        keys["num_eval"] = MAIN_NUM_EVAL
    if task == "countdown" and method in ("grpo_lora", "grpo_full"):
        # 8 prompts x 8 completions at 48 tokens ran out of 24 GiB (examples/grpo_countdown.yaml)
        keys["batch_size"] = 2
    return keys


def sft_keys(task: str, seed: int) -> dict[str, Any]:
    return {"model": COMMON["model"], "dtype": DTYPE, "max_new_tokens": MAX_NEW_TOKENS, "num_eval": MAIN_NUM_EVAL,
            **TASKS[task]["keys"], **SFT, "seed": seed, "report_to": []}


# Peak memory, measured apart from the timed runs (2 steps each, the method's chosen setting): (method, variant).
# default: the setting as it ran; no_drift: ES without `log_drift`'s fp32 copy of the starting weights (the timed
# ES runs keep it off; a user's run has it on by default, so `default` turns it on); accumulation4: GRPO's
# completions in 4 slices for the loss (`gradient_accumulation_steps: 4`).
MEMORY_PROBES = [("full_es", "default"), ("full_es", "no_drift"), ("es_lora", "default"), ("lowrank", "default"),
                 ("mezo", "default"),
                 ("essa", "default"), ("grpo_lora", "default"), ("grpo_lora", "accumulation4"),
                 ("grpo_full", "default"), ("grpo_full", "accumulation4")]
MEMORY_VARIANTS = {"default": {"log_drift": True}, "no_drift": {"log_drift": False},
                   "accumulation4": {"gradient_accumulation_steps": 4}}


def memory_keys(method: str, setting: dict[str, Any], variant: str) -> dict[str, Any]:
    keys = {**run_keys(method, "arithmetic", setting, TUNING_SEED), "iterations": 2, "max_training_seconds": 0.0,
            "num_eval": 16}
    variant_keys = dict(MEMORY_VARIANTS[variant])
    if METHODS[method]["command"] == "grpo":
        variant_keys.pop("log_drift", None)  # GRPO has no drift copy
    elif "log_drift" in variant_keys and method != "full_es":
        variant_keys["log_drift"] = True
    return {**keys, **variant_keys}

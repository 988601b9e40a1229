"""Shared-prefix prefill on vs off: one candidate's generate() on a task's prompts, side by side in one run.

Both arms use one loaded model (HFBackend with shared_prefix true / false around the same weights),
the same prompts and the same number of new tokens (EOS suppressed until max_new_tokens, so the two
arms are one workload), alternating which arm goes first from repeat to repeat so that load from other
processes falls on both. Each timed call's completions are compared with the other arm's (counted).
shared_prefix is forced on in both dtypes (its default is on only in float32, where they are identical).

    OMP_NUM_THREADS=1 python -m bench.speed.shared_prefix --dtype float32 --repeats 3

Tasks: arithmetic (32 prompts x 10 new tokens, the quickstart's batch; SmolLM2's chat template puts a
21-token system prompt before each question) and countdown (16 prompts x 48 new tokens, examples/
countdown.yaml's batch; a system prompt plus instructions in which the numbers come early).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from bench.common import write_result
from evotune.backends import HFBackend, render_prompt  # noqa: E402
from evotune.backends.shared_prefix import common_prefix_length  # noqa: E402
from evotune.tasks import get_task  # noqa: E402

WORKLOADS = {"arithmetic": (32, 10, {}),
             "countdown": (16, 48, {"min_numbers": 3, "max_numbers": 3, "max_number": 20, "max_target": 50})}


def prompt_shape(backend: HFBackend, prompts: list) -> dict:
    """Prompt lengths in tokens and the prefix they share."""
    texts = [render_prompt(backend.tokenizer, prompt) for prompt in prompts]
    ids = backend.tokenizer(texts, add_special_tokens=False)["input_ids"]
    return {"prompt_tokens_mean": round(statistics.mean(len(row) for row in ids), 1),
            "prompt_tokens_max": max(len(row) for row in ids), "shared_prefix_tokens": common_prefix_length(ids)}


def measure(shared: HFBackend, plain: HFBackend, task: str, repeats: int) -> dict:
    batch_size, max_new_tokens, task_args = WORKLOADS[task]
    prompts = [row["prompt"] for row in get_task(task, **task_args).train_rows[:batch_size]]
    times: dict[str, list[float]] = {"shared_prefix": [], "plain": []}
    differing = []  # per repeat: completions that differ between the arms
    shared.generate(prompts, max_new_tokens)  # warm-up: allocator, threads, tokenizer caches
    plain.generate(prompts, max_new_tokens)
    for repeat in range(repeats):
        arms = [("shared_prefix", shared), ("plain", plain)]
        outputs = {}
        for name, backend in (arms if repeat % 2 == 0 else arms[::-1]):  # alternate which arm goes first
            started = time.perf_counter()
            outputs[name] = backend.generate(prompts, max_new_tokens)
            times[name].append(time.perf_counter() - started)
        differing.append(sum(a != b for a, b in zip(outputs["shared_prefix"], outputs["plain"])))
    median = statistics.median
    return {"task": task, "prompts": batch_size, "max_new_tokens": max_new_tokens, **prompt_shape(shared, prompts),
            "shared_prefix_s": [round(t, 3) for t in times["shared_prefix"]],
            "plain_s": [round(t, 3) for t in times["plain"]],
            "speedup_median": round(median(p / s for p, s in zip(times["plain"], times["shared_prefix"])), 3),
            "completions_identical": not any(differing), "differing_completions": differing}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--tasks", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--name", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    shared = HFBackend.load(args.model, dtype=args.dtype, shared_prefix=True)  # also where it is not the default
    plain = HFBackend(shared.model, shared.tokenizer, shared_prefix=False)
    results = []
    for task in args.tasks:
        shared.model.generation_config.min_new_tokens = WORKLOADS[task][1]  # the same tokens in both arms
        results.append(measure(shared, plain, task, args.repeats))
    write_result(args.name or f"shared_prefix_{args.dtype}", {
        "command": "OMP_NUM_THREADS=1 python -m bench.speed.shared_prefix " + " ".join(sys.argv[1:]),
        "model": args.model, "dtype": args.dtype, "fixed_length_generation": True, "results": results}, study="speed")


if __name__ == "__main__":
    main()

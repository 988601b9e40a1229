"""One-at-a-time vs population-batched evaluation of SVD-LoRA or full-rank candidates, side by side in one run.

Adapter candidates differ only in small LoRA matrices, so a chunk of them can share one batched
generate with one adapter per group of rows (ESSA's setting: Korotyshova, Shaposhnikov et al.,
arXiv 2507.04453). Arms, on the same candidates and prompts:
  * one at a time: LocalEvaluator (apply candidate, generate the prompt batch, score) per member;
  * batched: BatchedEvaluator with population_batch_size P (P candidates per generate call).
`--space full` does the same for ES at Scale's full-parameter candidates (Qiu et al., arXiv 2509.24372):
each chunk of P candidates runs through P stacked copies of the perturbed weights in one generate
(backends/stacked_weights.py). Reported: seconds per population (median over repeats), speedup over
one-at-a-time, and whether the rewards (and completions) are identical to the one-at-a-time arm.

    python -m bench.speed.population_batch --repeats 3
    python -m bench.speed.population_batch --space full --dtype float32 --population-batch-sizes 2 4 8 \
        --name population_batch_full

Every completion is generated to exactly max_new_tokens (EOS suppressed until then, in all arms,
as in bench/speed/overhead.py), so perturbed candidates do not make the arms different workloads.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import torch

from bench.common import write_result
from evotune.backends import DEFAULT_MODEL, HFBackend  # noqa: E402
from evotune.distributed import BatchedEvaluator, LocalEvaluator  # noqa: E402
from evotune.spaces import FullParameterSpace  # noqa: E402
from evotune.spaces.lora import init_lora_adapter, lora_factors  # noqa: E402
from evotune.spaces.svd_lora import SVDLoRASpace  # noqa: E402
from evotune.strategies import OpenES  # noqa: E402
from evotune.tasks import get_task  # noqa: E402


class RecordingTask:
    """The task, plus a log of every candidate's completions (to compare arms text for text)."""

    def __init__(self, task):
        self.task = task
        self.log: list[list[str]] = []

    def rewards(self, rows, completions):
        self.log.append(list(completions))
        return self.task.rewards(rows, completions)


def build(args):
    """Backend with a rank-r PEFT-default adapter whose B is perturbed (seeded), its SVD space, candidates; or
    with --space full the plain model, its full-parameter space and seed candidates at --sigma."""
    backend = HFBackend.load(args.model, args.dtype, "cpu")
    if args.space == "full":
        backend.model.generation_config.min_new_tokens = args.max_new_tokens  # fixed-length generation
        space = FullParameterSpace(backend.model, noise_kind="rademacher")
        strategy = OpenES(population_size=args.population_size, sigma=args.sigma, antithetic=True, seed=args.seed)
        return backend, space, strategy.ask()
    backend.model = init_lora_adapter(backend.model, rank=args.rank, seed=args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    with torch.no_grad():  # PEFT's zero B would make the mean a no-op and its SVD bases arbitrary
        for factor in lora_factors(backend.model):
            if factor.factor == "B":
                factor.weight.copy_(torch.randn(factor.weight.shape, generator=generator) * args.b_std)
    backend.model.generation_config.min_new_tokens = args.max_new_tokens  # fixed-length generation
    space = SVDLoRASpace(backend.model, alpha=1.0)
    strategy = OpenES(population_size=args.population_size, sigma=args.sigma, antithetic=True, seed=args.seed)
    return backend, space, strategy.ask()


def timed_evaluation(evaluator, candidates, rows) -> tuple[float, np.ndarray, list[list[str]]]:
    evaluator.task.log.clear()
    started = time.perf_counter()
    rewards = evaluator.evaluate(candidates, rows)
    return time.perf_counter() - started, rewards, list(evaluator.task.log)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--space", default="svd_lora", choices=["svd_lora", "full"])
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--population-size", type=int, default=24)
    parser.add_argument("--population-batch-sizes", type=int, nargs="+", default=[4, 8, 24])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=10)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--b-std", type=float, default=0.02)
    parser.add_argument("--sigma", type=float, default=None, help="default: 0.2 (svd_lora), 2e-3 (full)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="population_batch")
    args = parser.parse_args()
    if args.sigma is None:
        args.sigma = 2e-3 if args.space == "full" else 0.2

    load_average = os.getloadavg()[0]
    backend, space, candidates = build(args)
    task = RecordingTask(get_task("arithmetic", seed=args.seed))
    rows = task.task.train_rows[:args.batch_size]
    arms = {"one_at_a_time": LocalEvaluator(space, backend, task, args.max_new_tokens)}
    for size in args.population_batch_sizes:
        arms[f"batched_{size}"] = BatchedEvaluator(space, backend, task, args.max_new_tokens, size)
    for evaluator in arms.values():  # warm-up: caches, allocator, threads, every batch shape once
        evaluator.evaluate(candidates[:max(getattr(evaluator, "population_batch_size", 1), 2)], rows[:4])

    seconds: dict[str, list[float]] = {name: [] for name in arms}
    rewards: dict[str, np.ndarray] = {}
    completions: dict[str, list[list[str]]] = {}
    for _ in range(args.repeats):  # arms interleaved, so drifting machine load hits all of them
        for name, evaluator in arms.items():
            elapsed, rewards[name], completions[name] = timed_evaluation(evaluator, candidates, rows)
            seconds[name].append(elapsed)

    median = {name: statistics.median(values) for name, values in seconds.items()}
    reference, reference_text = rewards["one_at_a_time"], completions["one_at_a_time"]
    total_completions = sum(len(c) for c in reference_text)
    payload = {
        "command": "python -m bench.speed.population_batch " + " ".join(sys.argv[1:]),
        "model": args.model, "dtype": args.dtype, "space": args.space, "sigma": args.sigma,
        **({"lora_rank": args.rank, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"], "b_std": args.b_std}
           if args.space == "svd_lora" else {}),
        "population_size": args.population_size, "batch_size": args.batch_size,
        "max_new_tokens": args.max_new_tokens, "fixed_length_generation": True, "repeats": args.repeats,
        "load_average_at_start": round(load_average, 2),
        "seconds_per_population": {name: [round(x, 3) for x in values] for name, values in seconds.items()},
        "median_seconds_per_population": {name: round(value, 3) for name, value in median.items()},
        "speedup_over_one_at_a_time": {name: round(median["one_at_a_time"] / value, 2)
                                       for name, value in median.items() if name != "one_at_a_time"},
        "rewards_identical": {name: bool(np.array_equal(value, reference, equal_nan=True))
                              for name, value in rewards.items() if name != "one_at_a_time"},
        "identical_completions": {name: f"{sum(a == b for x, y in zip(text, reference_text) for a, b in zip(x, y))}"
                                        f"/{total_completions}"
                                  for name, text in completions.items() if name != "one_at_a_time"},
        "distinct_candidate_outputs": len({tuple(text) for text in reference_text}),
        "reward_mean_one_at_a_time": round(float(np.nanmean(reference)), 4),
    }
    write_result(args.name, payload, study="speed")


if __name__ == "__main__":
    main()

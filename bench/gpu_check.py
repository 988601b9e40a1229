"""The GPU check: exactness and throughput of the hf backend on whatever device this machine has.

Run by `bench/gpu_check.sh` on a lent GPU machine (and, with DEVICE=cpu and a tiny model, as a dry run in
CI so the script cannot rot). Each arm is a real `evotune train` run through the Python API:

  * resume: a run stopped after half its iterations and resumed equals the uninterrupted run, tensor for tensor;
  * throughput and learning, one row per method on the same task (arithmetic at 48 new tokens, population 30 x
    32 prompts on a GPU): full ES one candidate at a time (`full_one_at_a_time`: greedy decoding without a host
    sync per token, backends/decoding.py), the same with transformers' own decoding loop, a host sync per token
    (`full_own_loop`, the path before issue 43), with `compile_generation` (`full_compiled`: static cache, decoding
    step captured, batch sizes padded to buckets), population-batched (`full_batched`: `population_batch_size`,
    auto by default: sized from free GPU memory, the size used in the row), low-rank ES (the whole population in
    one generate), and GRPO where TRL is installed. `--arms` picks some. Each row gives seconds
    per iteration, candidate evaluations per second, held-out accuracy before and after, and its distance to
    the device's compute and memory-bandwidth limits (FLOPs and weight bytes per decoded token, from the
    model's parameter count).

    python bench/gpu_check.py --device cuda --output bench/results/gpu_check.json
    python bench/gpu_check.py --device cpu --model TINY_DIR --population-size 4 --batch-size 2 --max-new-tokens 4 \
        --iterations 2 --num-eval 4 --output /tmp/gpu_check.json          # the CI dry run
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable

# Dense bf16 peak and memory bandwidth of the cards we may be lent (vendor datasheets, SXM parts).
DEVICE_LIMITS = {"H200": {"bf16_tflops": 989.0, "bandwidth_tb_s": 4.8},
                 "H100": {"bf16_tflops": 989.0, "bandwidth_tb_s": 3.35}}


# The ES rows: config overrides of each (full_own_loop also decodes with transformers' own loop, see es_row).
ARMS = {"full_one_at_a_time": {}, "full_own_loop": {}, "full_compiled": {"compile_generation": True},
        "full_batched": {"population_batch_size": "auto"}, "lowrank": {"space": "lowrank", "perturbation_rank": 1}}


def population_batch_size(text: str) -> int | str:
    return text if text == "auto" else int(text)


def device_facts(device: str) -> dict[str, Any]:
    import torch

    facts = {"device": device, "torch": torch.__version__, "python": platform.python_version(),
             "cuda_available": torch.cuda.is_available()}
    if device.startswith("cuda"):
        name = torch.cuda.get_device_name(0)
        facts.update(name=name, memory_gib=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1))
        facts["limits"] = next((limits for key, limits in DEVICE_LIMITS.items() if key in name), None)
    else:
        facts.update(name=platform.processor() or platform.machine(), limits=None)
    return facts


def base_config(args: argparse.Namespace, **overrides: Any) -> dict[str, Any]:
    values = dict(model=args.model, task="arithmetic", population_size=args.population_size, antithetic=True,
                  sigma=2e-3, learning_rate=4e-3, noise="rademacher", iterations=args.iterations,
                  batch_size=args.batch_size, max_new_tokens=args.max_new_tokens, num_eval=args.num_eval,
                  eval_every=0, checkpoint_every=max(1, args.iterations // 2), device=args.device, dtype=args.dtype,
                  report_to=[], seed=0)
    values.update(overrides)
    return values


def metrics(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def es_row(args: argparse.Namespace, name: str, work: Path, own_loop: bool = False, **overrides: Any) -> dict[str, Any]:
    from evotune.backends.decoding import transformers_loop
    from evotune.config import TrainConfig
    from evotune.trainer import Trainer

    config = TrainConfig(**base_config(args, **overrides))
    started = time.perf_counter()
    trainer = Trainer(config, work / name)
    with transformers_loop() if own_loop else nullcontext():
        trainer.train()
    records = metrics(work / name)
    times = [r["time_s"] for r in records if "time_s" in r]
    evals = [r["eval/accuracy"] for r in records if "eval/accuracy" in r]
    per_iteration = sum(times) / len(times)
    rows = config.population_size * config.batch_size  # completions per iteration
    return {"method": name, "settings": overrides, "iterations": len(times),
            "candidates_per_generate": getattr(trainer.evaluator, "population_batch_size", 1),
            "seconds_per_iteration": round(per_iteration, 3),
            "candidate_evals_per_second": round(config.population_size / per_iteration, 2),
            "completions_per_second": round(rows / per_iteration, 1),
            "accuracy_before": evals[0], "accuracy_after": evals[-1], "wall_s": round(time.perf_counter() - started, 1),
            "tokens_per_iteration": rows * config.max_new_tokens,
            "parameters": sum(p.numel() for p in trainer.backend.model.parameters())}


def resume_check(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Stop a run after half its iterations, resume it, and count the tensors that differ from an uninterrupted run."""
    import torch

    from evotune.config import TrainConfig
    from evotune.trainer import Trainer

    whole = Trainer(TrainConfig(**base_config(args)), work / "resume_whole")
    whole.train()
    half = max(1, args.iterations // 2)
    Trainer(TrainConfig(**base_config(args, iterations=half)), work / "resume_split").train()
    resumed = Trainer(TrainConfig(**base_config(args)), work / "resume_split", resume=True)
    resumed.train()
    expected, got = whole.space.state_tensors(), resumed.space.state_tensors()
    differing = [name for name in expected if not torch.equal(expected[name].cpu(), got[name].cpu())]
    return {"tensors": len(expected), "differing": len(differing), "first_differing": differing[:3],
            "stopped_after": half, "iterations": args.iterations}


def limits_distance(row: dict[str, Any], facts: dict[str, Any], bytes_per_parameter: int) -> dict[str, Any]:
    """How far the row is from the device's limits: decoding one token of one row costs ~2 FLOPs per parameter,
    and each decoding step of a batch reads every weight once."""
    limits = facts.get("limits")
    if not limits or "tokens_per_iteration" not in row:
        return {}
    flops = 2.0 * row["parameters"] * row["tokens_per_iteration"]
    compute_s = flops / (limits["bf16_tflops"] * 1e12)
    return {"compute_bound_seconds_per_iteration": round(compute_s, 5),
            "share_of_bf16_peak": round(compute_s / row["seconds_per_iteration"], 5),
            "weight_bytes_per_step": row["parameters"] * bytes_per_parameter}


def grpo_row(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from evotune.baselines.grpo import GRPORunConfig, run_grpo

    config = GRPORunConfig(**{key: value for key, value in base_config(args).items()
                              if key in GRPORunConfig.__dataclass_fields__})
    started = time.perf_counter()
    summary = run_grpo(config, str(work / "grpo"))
    return {"method": "grpo", "summary": summary, "wall_s": round(time.perf_counter() - started, 1)}


def step(results: dict[str, Any], name: str, work: Callable[[], Any]) -> None:
    """One check: its result, or its error (the script goes on to the next check)."""
    started = time.perf_counter()
    try:
        results[name] = work()
    except Exception as error:  # noqa: BLE001 - a failed check is a row of the report, not the end of it
        results[name] = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-2000:]}
    failed = isinstance(results[name], dict) and "error" in results[name]
    print(f"gpu_check: {name} ({time.perf_counter() - started:.1f} s): "
          f"{'FAIL ' + results[name]['error'] if failed else 'ok'}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--population-size", type=int, default=30)
    parser.add_argument("--population-batch-size", type=population_batch_size, default="auto",
                        help="full ES batched arm: candidates per generate (default auto: from free GPU memory)")
    parser.add_argument("--arms", nargs="+", choices=[*ARMS, "grpo"], default=[*ARMS, "grpo"],
                        help="the throughput rows to measure (default: all)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--num-eval", type=int, default=256)
    parser.add_argument("--work-dir", default="/tmp/evotune_gpu_check")
    parser.add_argument("--output", required=True, help="JSON file for the report")
    parser.add_argument("--skip-grpo", action="store_true")
    args = parser.parse_args()
    work = Path(args.work_dir)
    if work.exists() and any(work.iterdir()):
        raise SystemExit(f"--work-dir {work} is not empty; give a new one (its runs would be refused)")
    facts = device_facts(args.device)
    results: dict[str, Any] = {"command": "python bench/gpu_check.py " + " ".join(sys.argv[1:]), "facts": facts}
    step(results, "resume", lambda: resume_check(args, work))
    arms = {name: dict(overrides) for name, overrides in ARMS.items() if name in args.arms}
    if "full_batched" in arms:
        arms["full_batched"]["population_batch_size"] = args.population_batch_size
    for name, overrides in arms.items():
        step(results, name, lambda name=name, overrides=overrides: es_row(args, name, work,
                                                                        own_loop=name == "full_own_loop", **overrides))
    if not args.skip_grpo and "grpo" in args.arms:
        step(results, "grpo", lambda: grpo_row(args, work))
    bytes_per_parameter = 2 if args.dtype in ("auto", "bfloat16") and args.device.startswith("cuda") else 4
    for name in arms:
        if "error" not in results[name]:
            results[name].update(limits_distance(results[name], facts, bytes_per_parameter))
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(json.dumps({name: {k: v for k, v in value.items() if k != "traceback"} if isinstance(value, dict) else value
                      for name, value in results.items()}, indent=2, default=str))


if __name__ == "__main__":
    main()

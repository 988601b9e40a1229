"""The GPU check: exactness, throughput and learning of the hf backend on whatever device this machine has.

Run by `bench/gpu_check/gpu_check.sh run` on a lent GPU machine (and, with DEVICE=cpu and a tiny model, as a dry
run in CI, from the installed wheel as on the GPU machine, so the script cannot rot). Every row is a real
`evotune train` (or `evotune grpo`) run through the Python API, in this order, each while time is left
(`--budget-seconds`; a step that would not fit is recorded as skipped, and the report is rewritten after every
step so a killed run still leaves what it measured):

  * resume: a run stopped after half its iterations and resumed equals the uninterrupted run, tensor for tensor
    (4 candidates x 4 prompts x 8 new tokens: exactness does not depend on the size, and it runs first);
  * throughput, one row per arm on the same task (arithmetic, 48 new tokens, population 30 x 32 prompts on a GPU):
    full-es one candidate at a time (`full_one_at_a_time`: greedy decoding without a host sync per token), the
    same with transformers' own loop (`full_own_loop`, a host sync per token), population-batched
    (`full_batched`: `population_batch_size`, auto by default: sized from free GPU memory), lowrank-es
    (`lowrank`: the whole population in one generate), both again with the fp32 mean on the GPU
    (`*_device_master`: `master_device: device`), `compile_generation` (`full_compiled`), and GRPO where
    TRL is installed. Each row: seconds per iteration (median after the first), candidate evaluations per
    second, generated token slots per second (rows x new tokens), peak GPU memory, and
  * the fraction of pure-inference throughput (EGGROLL's measure): the row's token slots per second over those of
    plain generation with the same model, the same prompts, rows per generate and new tokens, timed in this run;
  * its distance to the device's limits: FLOPs per iteration over bf16 peak, weight bytes read per decoding step
    over memory bandwidth;
  * where the time goes (profile.py): for low-rank, batched and one-at-a-time full-es, one iteration's phases
    (ask, writing candidates, generate, rewards, tell, update) timed with the device synchronized, and the top
    operators and kernel launches of the next under torch.profiler (`--no-profile` leaves them out);
  * learning at a fixed wall time (`--learn-seconds`, 60 on a GPU): held-out accuracy before and after, for
    lowrank-es, batched full-es and GRPO, seeds 0..2 where time allows.

A lent GPU comes for 15 minutes, start included, so one call seldom measures everything. `--previous FILE ...`
(gpu_check.sh passes the committed bench/results/gpu_check/gpu_check_*.json) keeps the rows an earlier run measured
on a card
of the same name, each marked `carried_from`, and measures only the rest; a card of another name measures all.
A step starts only if its estimate (ESTIMATE_SECONDS, from the first H200 run) fits the time left.

    python -m bench.gpu_check.check --device cuda --output bench/results/gpu_check.json
    python -m bench.gpu_check.check --device cpu --model TINY_DIR --population-size 4 --batch-size 2 \
        --max-new-tokens 4 --iterations 2 --num-eval 4 --learn-seconds 2 --output /tmp/gpu_check.json   # dry run
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from bench.gpu_check.profile import profile_row
from bench.gpu_check.report import Report, Step, print_plan

# Dense bf16 peak and memory bandwidth of the cards we may be lent (vendor datasheets, SXM parts).
DEVICE_LIMITS = {"H200": {"bf16_tflops": 989.0, "bandwidth_tb_s": 4.8},
                 "H100": {"bf16_tflops": 989.0, "bandwidth_tb_s": 3.35}}

# The ES throughput rows: config overrides of each (full_own_loop also decodes with transformers' own loop).
# (full-es on CUDA defaults to `population_batch_size: auto`, so the one-at-a-time arms say 1)
# Every arm names where the fp32 mean lives: the first rows were measured with it on the host (then the default),
# and the *_device_master arms keep it beside the weights on the GPU (now `auto`'s choice where it fits), so a
# default that changes does not change what a row measures.
HOST = {"master_device": "host"}
ARMS = {"full_one_at_a_time": {"population_batch_size": 1, **HOST},
        "full_batched": {"population_batch_size": "auto", **HOST},
        "full_batched_device_master": {"population_batch_size": "auto", "master_device": "device"},
        "lowrank": {"space": "lowrank", "perturbation_rank": 1, **HOST},
        "lowrank_device_master": {"space": "lowrank", "perturbation_rank": 1, "master_device": "device"},
        "full_own_loop": {"population_batch_size": 1, **HOST},
        "full_compiled": {"compile_generation": True, **HOST}}
# Rows measured again even when an earlier report on the same card has them: name an arm here when the code it
# times changes, and empty it once a lent GPU has measured it again.
REMEASURE: tuple[str, ...] = ()
# Seconds each step took on the first H200 run (bench/results/gpu_check/gpu_check_h200*.json), model loads and
# evaluations included, rounded up: a step starts only when its estimate fits the time left (a learning row: its
# --learn-seconds plus LEARN_OVERHEAD_SECONDS).
ESTIMATE_SECONDS = {"resume": 60, "full_one_at_a_time": 160, "full_own_loop": 170, "full_batched": 70,
                    "full_batched_device_master": 70, "lowrank": 45, "lowrank_device_master": 45,
                    "full_compiled": 115, "grpo": 90,
                    # guessed from the throughput rows (a load, three iterations, the profiler's own cost)
                    "profile_lowrank": 40, "profile_full_batched": 75, "profile_full_one_at_a_time": 180}
# The arms profiled (profile.py), cheapest first; one at a time comes after the learning rows, since its generate
# is already 80% of its iteration (the throughput row) and its profile costs the most.
PROFILE_ARMS = ("lowrank", "full_batched", "full_one_at_a_time")
PROFILED_LAST = ("full_one_at_a_time",)
LEARN_OVERHEAD_SECONDS = 45
# Learning at a fixed wall time: (name, overrides, seeds); GRPO is added where TRL is installed.
LEARN = [("lowrank", ARMS["lowrank"], (0, 1, 2)), ("full_batched", ARMS["full_batched"], (0,))]
LEARN_GRPO_SEEDS = (0, 1, 2)


def population_batch_size(text: str) -> int | str:
    return text if text == "auto" else int(text)


def device_facts(device: str) -> dict[str, Any]:
    import torch

    import evotune

    facts = {"device": device, "torch": torch.__version__, "python": platform.python_version(),
             "cuda_available": torch.cuda.is_available(), "evotune": evotune.__file__}
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


class PeakMemory:
    """Peak GPU memory of one step, in MiB (None on a CPU)."""

    def __enter__(self) -> PeakMemory:
        import torch

        self.cuda = torch.cuda.is_available()
        self.mib = None
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch

        if self.cuda:
            self.mib = round(torch.cuda.max_memory_allocated() / 2**20, 1)


def train(config_values: dict[str, Any], run: Path, own_loop: bool = False) -> tuple[Any, list[dict], float | None]:
    from evotune.backends.decoding import transformers_loop
    from evotune.config import TrainConfig
    from evotune.trainer import Trainer

    with PeakMemory() as peak:
        trainer = Trainer(TrainConfig(**config_values), run)
        with transformers_loop() if own_loop else nullcontext():
            trainer.train()
    return trainer, metrics(run), peak.mib


def pure_generation_seconds(trainer: Any, rows_per_generate: int, total_rows: int) -> float:
    """Seconds plain greedy generation of `total_rows` training prompts takes, `rows_per_generate` per call, with
    the run's model (its mean weights) and new tokens: the pure-inference side of the fraction."""
    import torch

    prompts = [row["prompt"] for row in trainer.task.train_rows]
    prompts = (prompts * (total_rows // len(prompts) + 1))[:total_rows]
    generate = trainer.backend.generate
    generate(prompts[:rows_per_generate], trainer.config.max_new_tokens)  # warm-up: allocator, kernels
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    started = time.perf_counter()
    for start in range(0, total_rows, rows_per_generate):
        generate(prompts[start:start + rows_per_generate], trainer.config.max_new_tokens)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - started


def es_row(args: argparse.Namespace, name: str, work: Path, facts: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    started = time.perf_counter()
    trainer, records, peak_mib = train(base_config(args, num_eval=args.throughput_num_eval, **overrides), work / name,
                                       own_loop=name == "full_own_loop")
    config = trainer.config
    times = [r["time_s"] for r in records if "time_s" in r]
    evals = [r["eval/accuracy"] for r in records if "eval/accuracy" in r]
    per_iteration = statistics.median(times[1:] if len(times) > 1 else times)
    batched = getattr(trainer.evaluator, "population_batch_size", 1)
    rows_per_generate = config.batch_size * (config.population_size if config.space == "lowrank" else batched)
    rows = config.population_size * config.batch_size  # completions per iteration
    pure = pure_generation_seconds(trainer, rows_per_generate, rows)
    row = {"method": name, "settings": overrides, "iterations": len(times), "iteration_seconds": times,
           "candidates_per_generate": config.population_size if config.space == "lowrank" else batched,
           "rows_per_generate": rows_per_generate,
           "seconds_per_iteration": round(per_iteration, 4),
           "candidate_evals_per_second": round(config.population_size / per_iteration, 2),
           "completions_per_second": round(rows / per_iteration, 1),
           "token_slots_per_second": round(rows * config.max_new_tokens / per_iteration, 1),
           "pure_generation_seconds": round(pure, 4),
           "pure_token_slots_per_second": round(rows * config.max_new_tokens / pure, 1),
           "fraction_of_pure_inference": round(pure / per_iteration, 3),
           "peak_gpu_memory_mib": peak_mib, "accuracy_before": evals[0], "accuracy_after": evals[-1],
           # the same seeds in every arm: equal rewards say the arms generated the same completions
           "reward_mean_per_iteration": [r["reward_mean"] for r in records if "reward_mean" in r],
           "num_eval": args.throughput_num_eval, "wall_s": round(time.perf_counter() - started, 1),
           "tokens_per_iteration": rows * config.max_new_tokens,
           "decoding_steps_per_iteration": -(-rows // rows_per_generate) * config.max_new_tokens,
           "parameters": sum(p.numel() for p in trainer.backend.model.parameters())}
    row.update(limits_distance(row, facts, next(trainer.backend.model.parameters()).element_size()))
    trainer.backend.close()
    return row


def resume_check(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Stop a run after half its iterations, resume it, and count the tensors that differ from an uninterrupted run
    (a small population and few tokens: exactness does not depend on the size)."""
    import torch

    from evotune.config import TrainConfig
    from evotune.trainer import Trainer

    small = dict(population_size=min(args.population_size, 4), batch_size=min(args.batch_size, 4),
                 max_new_tokens=min(args.max_new_tokens, 8), num_eval=min(args.num_eval, 4), iterations=4,
                 checkpoint_every=2, population_batch_size=1)
    whole = Trainer(TrainConfig(**base_config(args, **small)), work / "resume_whole")
    whole.train()
    Trainer(TrainConfig(**base_config(args, **{**small, "iterations": 2})), work / "resume_split").train()
    resumed = Trainer(TrainConfig(**base_config(args, **small)), work / "resume_split", resume=True)
    resumed.train()
    expected, got = whole.space.state_tensors(), resumed.space.state_tensors()
    differing = [name for name in expected if not torch.equal(expected[name].cpu(), got[name].cpu())]
    return {"tensors": len(expected), "differing": len(differing), "first_differing": differing[:3],
            "stopped_after": 2, "iterations": 4}


def limits_distance(row: dict[str, Any], facts: dict[str, Any], bytes_per_parameter: int) -> dict[str, Any]:
    """How far the row is from the device's limits: decoding one token of one row costs ~2 FLOPs per parameter,
    and each decoding step of a batch reads every weight once, once per candidate where full-rank candidates share
    a generate (each has its own copy of the weights; low-rank members share the base's)."""
    limits = facts.get("limits")
    if not limits or "tokens_per_iteration" not in row:
        return {}
    compute_s = 2.0 * row["parameters"] * row["tokens_per_iteration"] / (limits["bf16_tflops"] * 1e12)
    copies = row["candidates_per_generate"] if row["settings"].get("space", "full") == "full" else 1
    weight_bytes = row["parameters"] * bytes_per_parameter * copies
    bandwidth_s = row["decoding_steps_per_iteration"] * weight_bytes / (limits["bandwidth_tb_s"] * 1e12)
    return {"compute_bound_seconds_per_iteration": round(compute_s, 5),
            "share_of_bf16_peak": round(compute_s / row["seconds_per_iteration"], 5),
            "weight_bytes_per_step": weight_bytes,
            "bandwidth_bound_seconds_per_iteration": round(bandwidth_s, 5),
            "share_of_bandwidth": round(bandwidth_s / row["seconds_per_iteration"], 5)}


def grpo_config(args: argparse.Namespace, run: Path, **overrides: Any) -> Any:
    from evotune.baselines.grpo import GRPORunConfig

    values = {key: value for key, value in base_config(args, **overrides).items()
              if key in GRPORunConfig.__dataclass_fields__}
    return GRPORunConfig(**values)


def grpo_row(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from evotune.baselines.grpo import run_grpo

    config = grpo_config(args, work / "grpo", num_eval=args.throughput_num_eval)
    started = time.perf_counter()
    with PeakMemory() as peak:
        summary = run_grpo(config, str(work / "grpo"))
    steps = [r for r in metrics(work / "grpo") if "time_s" in r]
    completions = config.batch_size * config.num_generations
    per_step = statistics.median([r["time_s"] for r in steps[1:]] or [r["time_s"] for r in steps])
    return {"method": "grpo", "summary": summary, "steps": len(steps), "seconds_per_step": round(per_step, 4),
            "completions_per_second": round(completions / per_step, 1),
            "token_slots_per_second": round(completions * config.max_new_tokens / per_step, 1),
            "peak_gpu_memory_mib": peak.mib, "wall_s": round(time.perf_counter() - started, 1),
            "config": {key: getattr(config, key) for key in ("lora", "lora_rank", "batch_size", "num_generations",
                                                              "temperature", "learning_rate", "max_new_tokens")}}


def learn_row(args: argparse.Namespace, work: Path, name: str, overrides: dict[str, Any], seed: int) -> dict[str, Any]:
    """Held-out accuracy before and after `--learn-seconds` of training (evaluation excluded)."""
    run = work / f"learn_{name}_seed{seed}"
    timing = dict(max_training_seconds=args.learn_seconds, num_eval=args.num_eval, seed=seed)
    if name == "grpo":
        from evotune.baselines.grpo import run_grpo

        run_grpo(grpo_config(args, run, iterations=100000, **timing), str(run))
    else:
        train(base_config(args, iterations=100000, checkpoint_every=100000, **timing, **overrides), run)
    records = metrics(run)
    evals = [r["eval/accuracy"] for r in records if "eval/accuracy" in r]
    return {"method": name, "seed": seed, "settings": overrides, "learn_seconds": args.learn_seconds,
            "steps": sum(1 for r in records if "time_s" in r), "accuracy_before": evals[0], "accuracy_after": evals[-1],
            "num_eval": args.num_eval}


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--population-size", type=int, default=30)
    parser.add_argument("--population-batch-size", type=population_batch_size, default="auto",
                        help="full-es batched arm: candidates per generate (default auto: from free GPU memory)")
    parser.add_argument("--arms", nargs="+", choices=["resume", *ARMS, "grpo"], default=["resume", *ARMS, "grpo"],
                        help="the resume check and throughput rows to measure (default: all)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--iterations", type=int, default=3, help="iterations of each throughput row")
    parser.add_argument("--num-eval", type=int, default=256, help="held-out prompts of the learning rows")
    parser.add_argument("--throughput-num-eval", type=int, default=32, help="held-out prompts of the throughput rows")
    parser.add_argument("--learn-seconds", type=float, default=60.0, help="training time of each learning row")
    parser.add_argument("--no-learn", action="store_true", help="leave out the learning rows")
    parser.add_argument("--no-profile", action="store_true", help="leave out the profile rows")
    parser.add_argument("--budget-seconds", type=float, default=440.0,
                        help="start no step that would end after this many seconds from the start")
    parser.add_argument("--work-dir", default="/tmp/evotune_gpu_check")
    parser.add_argument("--output", help="JSON file for the report (required unless --plan)")
    parser.add_argument("--plan", action="store_true", help="print what a run would measure, carry and skip, and stop")
    parser.add_argument("--card", default="NVIDIA H200", help="with --plan: the card's name, for the carried rows")
    parser.add_argument("--remeasure", nargs="*", default=list(REMEASURE),
                        help="rows measured again even when --previous has them (default: %(default)s)")
    parser.add_argument("--previous", nargs="*", type=Path, default=[],
                        help="earlier reports: their rows measured on a card of this name are kept, not measured again")
    args = parser.parse_args()
    if not args.plan and not args.output:
        parser.error("--output is required (or give --plan)")
    return args




def plan_steps(args: argparse.Namespace, work: Path, facts: dict[str, Any], has_trl: bool) -> list[Step]:
    """Every row the check may measure, in order: resume, the throughput arms, GRPO, the cheaper profiles, the
    learning rows (the first seed of every method first), the costliest profile."""
    steps: list[Step] = []
    if "resume" in args.arms:
        steps.append(("resume", lambda: resume_check(args, work), ESTIMATE_SECONDS["resume"]))
    arms = {name: dict(overrides) for name, overrides in ARMS.items() if name in args.arms}
    for name in ("full_batched", "full_batched_device_master"):
        if name in arms:
            arms[name]["population_batch_size"] = args.population_batch_size
    for name, overrides in arms.items():
        steps.append((name, lambda name=name, overrides=overrides: es_row(args, name, work, facts, **overrides),
                      ESTIMATE_SECONDS[name]))
    if "grpo" in args.arms and has_trl:
        steps.append(("grpo", lambda: grpo_row(args, work), ESTIMATE_SECONDS["grpo"]))
    profiled = [] if args.no_profile else [name for name in PROFILE_ARMS if name in arms]
    profiles = {name: (f"profile_{name}", lambda name=name: profile_row(
        base_config(args, num_eval=args.throughput_num_eval, **arms[name]), work / f"profile_{name}", name,
        arms[name]), ESTIMATE_SECONDS[f"profile_{name}"]) for name in profiled}
    steps += [step for name, step in profiles.items() if name not in PROFILED_LAST]
    for name, overrides, seed in [] if args.no_learn else learning_order(arms, has_trl):
        steps.append((f"learn_{name}_seed{seed}",
                      lambda name=name, overrides=overrides, seed=seed: learn_row(args, work, name, overrides, seed),
                      args.learn_seconds + LEARN_OVERHEAD_SECONDS))
    steps += [step for name, step in profiles.items() if name in PROFILED_LAST]
    return steps


def main() -> None:
    args = parse_arguments()
    work = Path(args.work_dir)
    if args.plan:
        print_plan(plan_steps(args, work, {}, _has_trl()), args)
        return
    if work.exists() and any(work.iterdir()):
        raise SystemExit(f"--work-dir {work} is not empty; give a new one (its runs would be refused)")
    facts = device_facts(args.device)
    report = Report(Path(args.output), args.budget_seconds, facts, args.previous, args.remeasure)
    for name, measure, seconds in plan_steps(args, work, facts, _has_trl()):
        report.step(name, measure, needs_seconds=seconds)
    print(json.dumps({name: {k: v for k, v in value.items() if k != "traceback"} if isinstance(value, dict) else value
                      for name, value in report.results.items()}, indent=2, default=str))


def learning_order(arms: dict[str, dict[str, Any]], has_trl: bool) -> list[tuple[str, dict[str, Any], int]]:
    """(method, overrides, seed) of the learning rows: the first seed of every method, then the further seeds."""
    learning = [(name, arms.get(name, overrides), seeds) for name, overrides, seeds in LEARN]
    if has_trl:
        learning.append(("grpo", {}, LEARN_GRPO_SEEDS))
    return [(name, overrides, seeds[index]) for index in range(3) for name, overrides, seeds in learning
            if index < len(seeds)]


def _has_trl() -> bool:
    import importlib.util

    return importlib.util.find_spec("trl") is not None


if __name__ == "__main__":
    main()

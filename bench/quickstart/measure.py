"""The quickstart's held-out gain: the base model and each seed's trained model on fresh arithmetic questions.

`run.sh` trains `evotune train` (or, COMMAND=grpo, `evotune grpo`) with the shipped quickstart defaults
(nothing overridden but the seed) and records each run's wall time; this script draws a fresh held-out set
from another seed than any run's, drops every question any run could have trained on, and scores the base
and each final model (a GRPO run's: its LoRA adapter on the base) on the rest,
greedy, at the task's untruncated evaluation budget (48 new tokens for arithmetic, never the training budget),
and also at growing budgets to show that budget does not cut the answers it scores. Each run's gain over the
base is paired (the same prompts), with a bootstrap 95% interval over prompts.

    python -m bench.quickstart.measure runs/quickstart_study/seed0 runs/quickstart_study/seed1 ...

Runs of different settings (candidate quickstarts, run.sh's SETTINGS) measured in one call are scored on the same
held-out questions against one base, side by side; the result then also summarizes each setting's seeds apart
(`by_settings`), with their wall times and the speed probes recorded before them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import accuracy_by_budget, seed_summary, write_result
from evotune.backends import HFBackend
from evotune.builders import build_task
from evotune.config.grpo import GRPORunConfig
from evotune.config.train import TrainConfig
from evotune.evaluation.generation import eval_budget
from evotune.runs.directory import read_run_config
from evotune.tasks import get_task
from evotune.tasks.phrasings import TRANSFER_BUDGETS, TRANSFER_MAX_NEW_TOKENS, questions_of, transfer_rows

# the settings each command's result records of its quickstart
RECORDED = {"train": ("method", "space", "perturbation_rank", "population_size", "antithetic", "sigma", "learning_rate",
                      "noise", "fitness_shaping", "iterations", "batch_size", "max_new_tokens", "dtype", "task_args",
                      "max_training_seconds", "training_clock"),
            "grpo": ("lora", "lora_rank", "learning_rate", "temperature", "beta", "num_generations", "iterations",
                     "batch_size", "max_new_tokens", "dtype", "max_training_seconds", "training_clock")}


def run_config(run: str) -> tuple[Any, str]:
    """A run directory's config and its command: `evotune train`'s or `evotune grpo`'s (GRPO has its own key)."""
    values = read_run_config(Path(run))
    if "num_generations" in values:
        return GRPORunConfig.from_dict(values), "grpo"
    return TrainConfig.from_dict(values), "train"




def scores_by_budget(model: str, dtype: str, task, rows: list[dict], budgets: list[int],
                     transfer: dict[str, list[dict]]) -> tuple[dict[int, np.ndarray], dict[str, dict[int, np.ndarray]]]:
    """Accuracy per prompt with the answer cut at each budget (common.accuracy_by_budget) of `model`, on the held-out
    rows, and on each transfer group at TRANSFER_BUDGETS."""
    backend = HFBackend.load(model, dtype)
    return (accuracy_by_budget(backend, task, rows, budgets),
            {group: accuracy_by_budget(backend, task, members, TRANSFER_BUDGETS)
             for group, members in transfer.items()})


def training_done(run: Path) -> dict:
    """The steps a run took and their summed wall and CPU seconds (metrics.jsonl; a budgeted run's iterations are
    what its budget bought)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [row for row in rows if "time_s" in row]
    cpu = [row["cpu_s"] for row in steps if "cpu_s" in row]
    return {"iterations_done": max((row.get("iteration", row.get("step", 0)) for row in rows), default=0),
            "training_wall_s": round(sum(row["time_s"] for row in steps), 1),
            "training_cpu_s": round(sum(cpu), 1) if cpu else None}


def transfer_summary(scores: dict[str, dict[int, np.ndarray]]) -> dict:
    """Pooled transfer accuracy at every budget, and each group's at the scored one (TRANSFER_MAX_NEW_TOKENS)."""
    return {"accuracy": {budget: round(float(np.concatenate([group[budget] for group in scores.values()]).mean()), 4)
                         for budget in TRANSFER_BUDGETS},
            "by_group": {name: round(float(group[TRANSFER_MAX_NEW_TOKENS].mean()), 4)
                         for name, group in scores.items()}}


def pooled(scores: dict[str, dict[int, np.ndarray]]) -> np.ndarray:
    return np.concatenate([group[TRANSFER_MAX_NEW_TOKENS] for group in scores.values()])  # (transfer prompts,)


def paired_gain(trained: np.ndarray, base: np.ndarray, draws: int = 10_000, seed: int = 0) -> dict:
    """Mean gain in points and its bootstrap 95% interval, resampling prompts (the pairs stay together)."""
    rng = np.random.default_rng(seed)
    difference = trained - base  # (prompts,)
    samples = difference[rng.integers(0, len(difference), size=(draws, len(difference)))].mean(axis=1)
    low, high = np.percentile(samples, [2.5, 97.5])
    return {"gain_points": round(100 * difference.mean(), 2), "gain_ci95": [round(100 * low, 2), round(100 * high, 2)]}


def summarize(runs: list[dict]) -> dict:
    """One setting's seeds: their gains' spread (two or more seeds; one run's own interval is its gain_ci95), wall
    times and the probes recorded before them."""
    gains = [run["gain_points"] for run in runs]
    probes = [run["speed_probe"]["probe_s"] for run in runs if run.get("speed_probe")]
    return {"seeds": [run["seed"] for run in runs],
            "gain_over_seeds": seed_summary(gains, [run["seed"] for run in runs]) if len(gains) > 1 else None,
            "gain_points": gains, "wall_time_s": [run["wall_time_s"] for run in runs],
            "probe_s": probes or None}


def by_settings(runs: list[dict]) -> list[dict]:
    """The runs grouped by their settings (in the order each first appears), each group summarized."""
    groups: dict[str, list[dict]] = {}
    for run in runs:
        groups.setdefault(json.dumps(run["settings"], sort_keys=True), []).append(run)
    return [{"settings": group[0]["settings"], **summarize(group)} for group in groups.values()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="quickstart run directories (run.sh writes wall_time.json in each)")
    parser.add_argument("--num-eval", type=int, default=2048,
                        help="questions drawn; those in any run's training split are dropped (about 60%% here)")
    parser.add_argument("--seed", type=int, default=20261126, help="held-out draw's seed (no run trains on it)")
    parser.add_argument("--budgets", type=int, nargs="+", default=[16, 24, 32, 48, 64])
    parser.add_argument("--name", default="quickstart_heldout")
    parser.add_argument("--study", default="quickstart", help="writes bench/results/STUDY/NAME.json")
    args = parser.parse_args()
    configs, commands = zip(*(run_config(run) for run in args.runs))
    base = configs[0]
    if len(set(commands)) > 1:
        raise SystemExit("the runs mix `evotune train` and `evotune grpo` runs; measure each command's apart")
    if any(config.seed == args.seed for config in configs):
        raise SystemExit(f"--seed {args.seed} is a run's own seed; choose another for a fresh held-out draw")
    task = get_task(base.task, seed=args.seed, num_eval=args.num_eval, **base.task_args)
    seen = set()
    for config in configs:  # every question any run could have trained on
        seen |= {json.dumps(row["prompt"]) for row in build_task(config).train_rows}
    rows = [row for row in task.eval_rows if json.dumps(row["prompt"]) not in seen]
    # the transfer split (tasks/phrasings.py): other wordings, subtraction, one more digit, outside every question
    # any run trained on and the held-out rows
    trained_on = set().union(*(questions_of(build_task(config).train_rows) for config in configs))
    transfer = transfer_rows(args.seed, base.task_args.get("digits", 2), base.task_args.get("operations", "+"),
                             trained_on | questions_of(rows))
    budget = eval_budget(task, base.max_new_tokens)
    budgets = sorted(set(args.budgets) | {budget, base.max_new_tokens})
    started = time.perf_counter()
    base_scores, base_transfer = scores_by_budget(base.model, base.dtype, task, rows, budgets, transfer)
    result = {"command": "python -m bench.quickstart.measure " + " ".join(sys.argv[1:]), "task": base.task,
              "training_max_new_tokens": base.max_new_tokens, "eval_max_new_tokens": budget,
              "num_prompts": len(rows), "dropped_as_seen_in_training": args.num_eval - len(rows),
              "run_command": commands[0],
              "quickstart": {key: getattr(base, key) for key in RECORDED[commands[0]]},
              "transfer_split": {"groups": {name: len(members) for name, members in transfer.items()},
                                 "scored_budget": TRANSFER_MAX_NEW_TOKENS, "budgets": TRANSFER_BUDGETS},
              "base": {"accuracy": {k: round(float(v.mean()), 4) for k, v in base_scores.items()},
                       "transfer": transfer_summary(base_transfer)}, "runs": []}
    for run, config in zip(args.runs, configs):
        trained, trained_transfer = scores_by_budget(str(Path(run) / "final"), config.dtype, task, rows, budgets,
                                                     transfer)
        timing = json.loads((Path(run) / "wall_time.json").read_text())
        result["runs"].append({
            "run": run, "seed": config.seed, "wall_time_s": timing["wall_time_s"], "threads": timing["threads"],
            **training_done(Path(run)),
            "speed_probe": timing.get("speed_probe"),  # run.sh records it before each run (older runs lack it)
            "accuracy": {k: round(float(v.mean()), 4) for k, v in trained.items()},
            **paired_gain(trained[budget], base_scores[budget], seed=config.seed),
            "gain_points_by_budget": {k: round(100 * float((trained[k] - base_scores[k]).mean()), 2) for k in budgets},
            "transfer": {**transfer_summary(trained_transfer),
                         **paired_gain(pooled(trained_transfer), pooled(base_transfer), seed=config.seed)}})
    for run, config in zip(result["runs"], configs):
        run["settings"] = {key: getattr(config, key) for key in RECORDED[commands[0]]}
    groups = by_settings(result["runs"])
    if len(groups) > 1:  # candidate quickstarts side by side: each one's seeds summarized apart
        result["by_settings"], result["gain_over_seeds"] = groups, None
    else:
        result["gain_over_seeds"] = groups[0]["gain_over_seeds"]
    result["wall_time_s_max"] = max(run["wall_time_s"] for run in result["runs"])
    result["eval_wall_time_s"] = round(time.perf_counter() - started, 1)
    write_result(args.name, result, study=args.study)


if __name__ == "__main__":
    main()

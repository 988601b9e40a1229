"""Does the evaluation's token budget cut the *trained* models' answers? A task's held-out metrics for each
stability run's final model at growing max_new_tokens, on the run's own held-out split (dtype auto, greedy, one
thread), and the spread over seeds at chosen budgets.

bench/eval_budget/eval_budget.sh checked each task's budget on the base model only; trained models can answer at greater
length (bench/results/stability/stability_formats_arithmetic.md), so the check is repeated on every final model. Each
model
generates once, at the largest budget, with `evotune eval`'s own code path (load_for_eval, generate_in_chunks); the
answer at a smaller budget K is the first K tokens of that one, which is exact for greedy decoding (token t depends
only on the tokens before it). The answers are re-tokenized to cut them, so the script checks itself against
evaluations that generated at K directly: `logged` is each run's own last evaluation in training (at the run's
budget then: arithmetic 24, conciseness 128), `eval 32` an arithmetic run's `evotune eval` at 32 tokens
(eval-final.json, bench/stability/stability_formats.sh); the columns at those budgets must reproduce them.

    python -m bench.stability.stability_eval_budget runs/drift --methods es grpo --seeds 0 1 2 3 4
    python -m bench.stability.stability_eval_budget runs/stability_sources --methods noise data --seeds 0 \\
        --split-seeds 0 1 --name stability_eval_budget_sources
    E='runs/conciseness_pareto/es/learning_rate=0.004,sigma=0.002/seed{seed}'
    python -m bench.stability.stability_eval_budget --task conciseness --num-eval 64 --metrics reward \\
        contains_solution --template "es=$E" --template 'grpo=runs/conciseness_pareto/grpo/beta=0.0/seed{seed}' \\
        --template base=smollm2-135m-instruct --seeds 0 1 2 3 4 --budgets 32 64 128 256 --spread-budgets 32 128 256 \\
        --gain-over base --name stability_eval_budget_conciseness

Answers are kept beside each run (<run>/samples-tokens<MAX>.jsonl; the base's under runs/base-<task>-seed<N>/);
re-run to resume: only missing ones generate.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from bench.common import seed_summary, study_results, write_result
from evotune.backends.models import resolve_model
from evotune.evaluation.generation import generate_in_chunks
from evotune.runs.loading import load_for_eval
from evotune.tasks import get_task
from evotune.tracking.tracker import read_metrics


def model_path(run: str) -> str:
    """What to load: a run directory's final/ (full weights or adapter), else the model itself."""
    final = Path(run) / "final"
    return str(final) if final.is_dir() else run


def generate(model: str, rows: list[dict], tokens: int, samples: Path) -> list[str]:
    """Greedy answers at `tokens` new tokens, in held-out order; read back from `samples` when it is complete."""
    if samples.exists():
        kept = [json.loads(line) for line in samples.read_text().splitlines() if line.strip()]
        if len(kept) == len(rows) and all(k["prompt"] == r["prompt"] for k, r in zip(kept, rows)):
            return [k["completion"] for k in kept]
    backend = load_for_eval(model, "auto", "cpu")
    completions = generate_in_chunks(backend, rows, tokens)
    samples.parent.mkdir(parents=True, exist_ok=True)
    partial = samples.with_name(f".{samples.name}.partial")  # a killed run leaves no half-written file
    partial.write_text("".join(json.dumps({"prompt": r["prompt"], "completion": c}) + "\n"
                               for r, c in zip(rows, completions)))
    partial.replace(samples)
    return completions


def tokenizer_of(model: str):
    from transformers import AutoTokenizer

    if Path(model).is_dir():
        return AutoTokenizer.from_pretrained(model)
    source = resolve_model(model)  # an alias: its packaged GGUF holds the tokenizer
    return AutoTokenizer.from_pretrained(source.path, gguf_file=source.gguf_file)


def metrics_at(model: str, task, completions: list[str], budgets: list[int]) -> dict[int, dict[str, float]]:
    """The task's metrics when each answer is cut to its first K tokens (the model's own tokenizer), per K."""
    tokenizer = tokenizer_of(model)
    ids = tokenizer(completions, add_special_tokens=False)["input_ids"]
    result = {}
    for budget in budgets:
        cut = tokenizer.batch_decode([row[:budget] for row in ids], skip_special_tokens=True)
        result[budget] = {key: float(value) for key, value in task.evaluate(task.eval_rows, cut).items()}
    return result


def spread_lines(table: dict[str, dict], methods: list[str], budgets: list[int], metric: str,
                 baseline: str | None = None) -> tuple[list[str], dict]:
    """Per method (rows named <method>-seed<N>) and budget: each seed's value, mean, std with a bootstrap
    interval, range (evotune compare's seed_spread, so its table and this one agree). Shares are in points.
    baseline: a method whose value on the same seed's split is subtracted first (the gain over the base model:
    the splits differ by seed, and so does the base's score on them)."""
    scale, unit = (100, " points") if metric in ("accuracy", "contains_solution") else (1, "")
    label = metric if baseline is None else f"{metric} gain over {baseline}"
    lines = [f"| method | new tokens | {label} per seed | mean | std [bootstrap 95%] | range |", "|---" * 6 + "|"]
    summary: dict = {}
    for method in methods:
        runs = {name: row for name, row in table.items() if name.startswith(f"{method}-seed")}
        if len(runs) < 2 or method == baseline:
            continue
        for budget in budgets:
            offsets = [table[name.replace(method, baseline, 1)]["metrics"][budget][metric] if baseline else 0.0
                       for name in runs]
            values = (np.array([row["metrics"][budget][metric] for row in runs.values()])
                      - np.array(offsets)) * scale  # (seeds,)
            row = summary.setdefault(method, {})[budget] = seed_summary(values, list(runs))
            low, high = row["std_ci95"]
            lines.append(f"| {method} | {budget} | {', '.join(f'{v:.1f}' for v in values)} | {row['mean']:.1f} "
                         f"| {row['std']:.1f} [{low:.1f}, {high:.1f}]{unit} | {row['range']:.1f}{unit} |")
    return lines, summary


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="?", help="directory of <method>-seed<N> runs")
    parser.add_argument("--methods", nargs="+", default=["es", "grpo"])
    parser.add_argument("--template", action="append", default=[], metavar="METHOD=PATH",
                        help="a method's run directory with {seed} in it, or a model (the base) scored on "
                             "each seed's split; instead of RUNS/METHOD-seed{seed}")
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--split-seeds", type=int, nargs="*", default=None,
                        help="held-out splits to score on (default: each run's own seed)")
    parser.add_argument("--task", default="arithmetic")
    parser.add_argument("--metrics", nargs="+", default=["accuracy"], help="the task's metrics to tabulate")
    parser.add_argument("--budgets", type=int, nargs="+", default=[10, 16, 24, 32, 48, 64, 96, 128])
    parser.add_argument("--num-eval", type=int, default=512)
    parser.add_argument("--spread-budgets", type=int, nargs="*", default=[10, 24, 48],
                        help="budgets of the per-method spread table (arithmetic: training's, the old "
                             "evaluation's, the untruncated one)")
    parser.add_argument("--gain-over", metavar="METHOD",
                        help="also tabulate each method's gain over METHOD (the base model) on the same seed's split")
    parser.add_argument("--name", default="stability_eval_budget_arithmetic")
    args = parser.parse_args()
    templates = dict(item.split("=", 1) for item in args.template)
    if not templates:
        if args.runs is None:
            parser.error("give RUNS (with --methods) or --template METHOD=PATH")
        templates = {method: f"{args.runs}/{method}-seed{{seed}}" for method in args.methods}
    args.templates = templates
    return args


def main() -> None:
    args = parse_arguments()
    budgets, largest = sorted(args.budgets), max(args.budgets)
    table: dict[str, dict] = {}
    for method, template in args.templates.items():
        for seed in args.seeds:
            run = template.format(seed=seed)
            is_run = "{seed}" in template
            if is_run and not any((Path(run) / "final" / name).exists()
                                  for name in ("config.json", "adapter_config.json")):
                print(f"skipping {run}: no final model")
                continue
            for split in args.split_seeds if args.split_seeds is not None else [seed]:
                suffix = "" if args.split_seeds is None else f"-split{split}"
                task = get_task(args.task, seed=split, num_eval=args.num_eval)
                home = Path(run) if is_run else Path("runs") / f"base-{args.task}-seed{seed}"
                completions = generate(model_path(run), task.eval_rows, largest,
                                       home / f"samples-tokens{largest}{suffix}.jsonl")
                row: dict = {"model": run, "split_seed": split,
                             "metrics": metrics_at(model_path(run), task, completions, budgets)}
                own = Path(run) / "eval-final.json"  # evotune eval at 32 tokens (bench/stability/stability_formats.sh)
                if args.split_seeds is None and own.exists():
                    row["eval_32"] = json.loads(own.read_text())[0][args.metrics[0]]
                logged = ([r for r in read_metrics(Path(run) / "metrics.jsonl") if f"eval/{args.metrics[0]}" in r]
                          if is_run and args.split_seeds is None else [])
                row["logged"] = logged[-1][f"eval/{args.metrics[0]}"] if logged else None
                table[f"{method}-seed{seed}{suffix}"] = row
                print(f"{method}-seed{seed}{suffix}", json.dumps(row["metrics"][largest]))
    metric = args.metrics[0]
    command = ("python -m bench.stability.stability_eval_budget "
               + (f"{args.runs} --methods {' '.join(args.methods)}" if args.runs and not args.template else
                  " ".join(f"--template '{item}'" for item in args.template))
               + f" --seeds {' '.join(map(str, args.seeds))}"
               + (f" --split-seeds {' '.join(map(str, args.split_seeds))}" if args.split_seeds is not None else "")
               + f" --task {args.task} --metrics {' '.join(args.metrics)} --budgets {' '.join(map(str, budgets))}"
               + f" --spread-budgets {' '.join(map(str, args.spread_budgets))} --num-eval {args.num_eval}"
               + (f" --gain-over {args.gain_over}" if args.gain_over else "")
               + f" --name {args.name}")
    lines = [f"Command: `{command}`", "",
             f"Held-out {metric} ({args.task}, n = {args.num_eval} per split) of each final model with its answers "
             f"cut at K new tokens (one greedy generation at {largest} tokens, dtype auto). `eval 32`: the run's own "
             "`evotune eval` at 32 tokens; `logged`: the run's last evaluation in training, at its budget then "
             "(arithmetic 24, conciseness 128); the columns at those budgets must reproduce them.", "",
             "| model | " + " | ".join(f"K={b}" for b in budgets) + " | eval 32 | logged |",
             "|---" * (len(budgets) + 3) + "|"]
    for name, row in table.items():
        own, logged = row.get("eval_32"), row["logged"]
        lines.append(f"| {name} | " + " | ".join(f"{row['metrics'][b][metric]:.3f}" for b in budgets)
                     + f" | {'-' if own is None else f'{own:.3f}'} | {'-' if logged is None else f'{logged:.3f}'} |")
    summaries = {}
    spread_budgets = [b for b in args.spread_budgets if b in budgets]
    for spread_metric in args.metrics:
        for baseline in [None, args.gain_over] if args.gain_over else [None]:
            key = spread_metric if baseline is None else f"{spread_metric}_gain"
            spread, summaries[key] = spread_lines(table, list(args.templates), spread_budgets, spread_metric, baseline)
            if summaries[key]:
                what = spread_metric if baseline is None else f"the {spread_metric} gain over {baseline}"
                lines += ["", f"Spread of {what} over seeds at each budget:", "", *spread]
    write_result(args.name, {"command": command, "task": args.task, "budgets": budgets, "models": table,
                             "spread": summaries}, study="stability")
    (study_results("stability") / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

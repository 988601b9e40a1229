"""Does the transfer split's token budget cut the answers it scores? Each phrasing's accuracy and share of answers
ended (end of sequence) at growing budgets, for the base model and any trained models given.

The transfer split (src/evotune/tasks/phrasings.py) asks 2-digit sums in wordings that do not say "Reply with only
the number", so answers run longer than the template's. One greedy generation at the largest budget per model,
re-decoded at each smaller one (greedy decoding's first K tokens do not depend on the budget). The split's budget
(TRANSFER_MAX_NEW_TOKENS) must sit where, for every phrasing and model, accuracy has stopped changing: the smallest
budget at which each phrasing scores what it scores at the largest. The share of answers ended there is reported
beside it, phrasing by phrasing (a base model's answer to "Calculate a plus b." can run on past 192 tokens without
its last number changing).

    python -m bench.eval_budget.transfer_budget                           # the base model
    python -m bench.eval_budget.transfer_budget --model runs/quickstart   # and a trained one
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.common import cpu_facts

RESULT = Path(__file__).resolve().parents[2] / "bench" / "results" / "eval_budget" / "transfer_budget.json"
BUDGETS = [32, 48, 64, 96, 128, 192, 256]
ENDED_SHARE = 0.99
SPLIT_SEED = 20261205  # a split of its own: the check never reads a study's questions


def measure(model: str, rows: list[dict], task) -> dict:
    import numpy as np

    from evotune.evaluation.generation import generate_in_chunks
    from evotune.runs.loading import load_for_eval

    backend = load_for_eval(model, "float32", "cpu")
    started = time.perf_counter()
    completions = generate_in_chunks(backend, rows, max(BUDGETS))
    ids = [backend.tokenizer(text, add_special_tokens=False)["input_ids"] for text in completions]
    phrasings = sorted({row["phrasing"] for row in rows})
    result = {}
    for phrasing in phrasings:
        chosen = [index for index, row in enumerate(rows) if row["phrasing"] == phrasing]
        per_budget = {}
        for budget in BUDGETS:
            cut = [backend.tokenizer.decode(ids[index][:budget], skip_special_tokens=True) for index in chosen]
            accuracy = task.metric_values("accuracy", [rows[index] for index in chosen], cut)
            per_budget[str(budget)] = {"accuracy": round(float(np.nanmean(accuracy)), 4),
                                       "ended": round(float(np.mean([len(ids[index]) < budget for index in chosen])),
                                                      4)}
        result[phrasing] = {"n": len(chosen), "by_budget": per_budget,
                            "example": completions[chosen[0]][:300]}
    return {"phrasings": result, "generate_s": round(time.perf_counter() - started, 1)}


def smallest_budget(models: dict) -> int:
    """The smallest budget at which every phrasing of every model has the accuracy it has at the largest budget."""
    largest = str(max(BUDGETS))
    for budget in BUDGETS:
        if all(entry["by_budget"][str(budget)]["accuracy"] == entry["by_budget"][largest]["accuracy"]
               for model in models.values() for entry in model["phrasings"].values()):
            return budget
    return max(BUDGETS)


def cut_at(models: dict, budget: int) -> dict[str, dict[str, float]]:
    """Per model, the phrasings with fewer than ENDED_SHARE of their answers ended within `budget`: that share."""
    return {model: {name: entry["by_budget"][str(budget)]["ended"] for name, entry in found["phrasings"].items()
                    if entry["by_budget"][str(budget)]["ended"] < ENDED_SHARE} for model, found in models.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", default=[], help="a trained model or run directory (repeatable)")
    parser.add_argument("--per-group", type=int, default=128, help="questions per transfer group")
    parser.add_argument("--output", type=Path, default=RESULT)
    args = parser.parse_args()
    import torch

    from evotune.tasks import get_task
    from evotune.tasks.phrasings import transfer_rows

    torch.manual_seed(0)
    task = get_task("arithmetic", seed=SPLIT_SEED, num_eval=8)  # its accuracy metric
    groups = transfer_rows(SPLIT_SEED, 2, "+", set(), per_group=args.per_group)
    rows = [row for group in groups.values() for row in group]
    for group, members in groups.items():  # the template rows of the subtraction and 3-digit groups, by group
        for row in members:
            if row["phrasing"] == "template":
                row["phrasing"] = group
    models = {model: measure(model, rows, task) for model in ["smollm2-135m-instruct", *args.model]}
    budget = smallest_budget(models)
    record = {"command": "python -m bench.eval_budget.transfer_budget" + "".join(f" --model {m}" for m in args.model)
              + (f" --per-group {args.per_group}" if args.per_group != 128 else ""),
              "budgets": BUDGETS, "ended_share": ENDED_SHARE, "split_seed": SPLIT_SEED,
              "per_group": args.per_group, "models": models, "smallest_budget_accuracy_stops_changing": budget,
              "not_ended_there": cut_at(models, budget),
              "machine": {**cpu_facts(), "threads": torch.get_num_threads(), "torch": torch.__version__},
              "date": time.strftime("%Y-%m-%d %H:%M")}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=1) + "\n")
    for model, entry in models.items():
        print(model)
        for phrasing, data in entry["phrasings"].items():
            at = data["by_budget"]
            cells = "  ".join(f"{b}:{at[str(b)]['accuracy']:.2f}/{at[str(b)]['ended']:.2f}" for b in BUDGETS)
            print(f"  {phrasing:22} n={data['n']:3}  {cells}")
    print(f"smallest budget at which no phrasing's accuracy changes up to {max(BUDGETS)}: {budget}; answers not all "
          f"ended there: {cut_at(models, budget)}; wrote {args.output}")


if __name__ == "__main__":
    main()

"""The held-out measurement of the method matrix: accuracy on fresh questions at growing token budgets, and
retention with the KL to the starting model on other tasks' prompts.

The held-out set of a task is drawn from a seed no run uses and keeps only questions outside every run's
training and validation splits (all seeds of the study, the tuning seed included), so it is disjoint from
everything any arm trained or was tuned on. Tuning never reads it.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .arms import MAIN_NUM_EVAL, TASKS, TUNING_SEED, VALIDATION_SIZE

HELDOUT_SEED = 20261127
HELDOUT_DRAW = {"arithmetic": 4000, "countdown": 1200}  # questions drawn before the disjointness filter
# kept (n >= 512 asked): the first 512 fresh questions of the draw (METHOD_MATRIX_HELDOUT: fewer, for a smoke run)
HELDOUT_SIZE = int(os.environ.get("METHOD_MATRIX_HELDOUT", 512))
# accuracy at growing budgets, scored at the largest: 48 (training's budget) cut answers of some final models
# (accuracy still rose at 64), so every held-out score is read at 128 with the share of answers that had ended
BUDGETS = [32, 48, 64, 96, 128]
SCORED_BUDGET = max(BUDGETS)
RETENTION_TASKS = ["conciseness", "ifeval"]
RETENTION_NUM_EVAL = 32
RETENTION_BUDGET = 48  # training's budget; the retention and KL of every run are read at it


def heldout_rows(task_name: str) -> list[dict]:
    from evotune.tasks import get_task

    keys = TASKS[task_name]["keys"]
    task = get_task(task_name, seed=HELDOUT_SEED, num_eval=HELDOUT_DRAW[task_name], **keys.get("task_args", {}))
    seen = set()
    for seed in (TUNING_SEED, *TASKS[task_name]["seeds"]):
        for num_eval in (VALIDATION_SIZE, MAIN_NUM_EVAL):  # the split's training rows depend on its size
            split = get_task(task_name, seed=seed, num_eval=num_eval, **keys.get("task_args", {}))
            seen |= {json.dumps(row["prompt"]) for row in split.train_rows + split.eval_rows}
    fresh = [row for row in task.eval_rows if json.dumps(row["prompt"]) not in seen]
    if len(fresh) < HELDOUT_SIZE:
        raise RuntimeError(f"{task_name}: only {len(fresh)} fresh held-out questions; draw more (HELDOUT_DRAW)")
    return fresh[:HELDOUT_SIZE]


def transfer_split(task_name: str) -> dict[str, list[dict]]:
    """The task's transfer split (evotune.tasks.phrasings: other wordings, subtraction, one more digit), drawn from
    the held-out seed outside every question any run of the study trains, tunes or is scored on; {} for a task
    without one (Countdown)."""
    from evotune.tasks import get_task
    from evotune.tasks.phrasings import questions_of, transfer_rows

    if task_name != "arithmetic":
        return {}
    args = TASKS[task_name]["keys"].get("task_args", {})
    seen = questions_of(heldout_rows(task_name))
    for seed in (TUNING_SEED, *TASKS[task_name]["seeds"]):
        for num_eval in (VALIDATION_SIZE, MAIN_NUM_EVAL):
            split = get_task(task_name, seed=seed, num_eval=num_eval, **args)
            seen |= questions_of(split.train_rows + split.eval_rows)
    return transfer_rows(HELDOUT_SEED, args.get("digits", 2), args.get("operations", "+"), seen)


def transfer_scores(backend: Any, task: Any, groups: dict[str, list[dict]], first: int | None = None) -> dict[str, Any]:
    """Accuracy on the transfer split at TRANSFER_BUDGETS (scored at TRANSFER_MAX_NEW_TOKENS), pooled and per group,
    with the share of answers ended by each budget and the per-question scores (paired intervals); `first`: as
    scores_by_budget's."""
    import numpy as np

    from evotune.tasks.phrasings import TRANSFER_BUDGETS, TRANSFER_MAX_NEW_TOKENS

    pooled: dict[int, list] = {budget: [] for budget in TRANSFER_BUDGETS}
    ended: dict[int, list] = {budget: [] for budget in TRANSFER_BUDGETS}
    by_group = {}
    for name, rows in groups.items():
        scores, shares = scores_by_budget(backend, task, rows, TRANSFER_BUDGETS, first)
        by_group[name] = round(float(scores[TRANSFER_MAX_NEW_TOKENS].mean()), 4)
        for budget in TRANSFER_BUDGETS:
            pooled[budget].append(scores[budget])
            ended[budget].append((shares[budget], len(rows)))
    joined = {budget: np.concatenate(parts) for budget, parts in pooled.items()}  # (transfer questions,)
    return {"n": int(joined[TRANSFER_MAX_NEW_TOKENS].size), "scored_budget": TRANSFER_MAX_NEW_TOKENS,
            "accuracy": round(float(joined[TRANSFER_MAX_NEW_TOKENS].mean()), 4),
            "accuracy_by_budget": {str(b): round(float(v.mean()), 4) for b, v in joined.items()},
            "ended_by_budget": {str(b): round(sum(share * n for share, n in parts) / sum(n for _, n in parts), 4)
                                for b, parts in ended.items()},
            "by_group": by_group,
            "correct": "".join(str(int(value)) for value in joined[TRANSFER_MAX_NEW_TOKENS])}


def retention(backend: Any, start_model: str, seed: int) -> dict[str, float]:
    """retain/<task>/<metric> and /kl (per-token k3 KL to the starting model on the model's own completions)."""
    from evotune.evaluation.retention import Retention, reference_for
    from evotune.tasks import get_task

    tasks = [get_task(name, seed=seed, num_eval=RETENTION_NUM_EVAL) for name in RETENTION_TASKS]
    scorer = Retention(tasks, RETENTION_BUDGET, reference_for(backend.model, start_model))
    return scorer.evaluate(backend)


# a completion re-tokenized may come out a few tokens shorter than generated: one this close to a first pass's budget
# is taken as cut there and generated again at the whole budget
RETOKENIZED_MARGIN = 16


def generate_long_last(backend: Any, rows: list[dict], max_new_tokens: int, first: int | None = None) -> list[str]:
    """Greedy completions at `max_new_tokens`. With `first`, every row is generated at `first` new tokens, and only
    the rows whose answer had not ended well within it (RETOKENIZED_MARGIN) are generated again, from their prompts,
    at the whole budget, in chunks of their own: a chunk of 64 no longer decodes to the whole budget for the one
    answer in it that never ends. Greedy decoding's first tokens do not depend on the budget, so an answer that
    ended is the same either way (up to the rounding of its chunk's padding, which chunking already varies)."""
    from evotune.evaluation.generation import generate_in_chunks

    if first is None or first >= max_new_tokens:
        return generate_in_chunks(backend, rows, max_new_tokens)
    completions = generate_in_chunks(backend, rows, first)
    lengths = [len(backend.tokenizer(text, add_special_tokens=False)["input_ids"]) for text in completions]
    again = [index for index, length in enumerate(lengths) if length >= first - RETOKENIZED_MARGIN]
    for index, text in zip(again, generate_in_chunks(backend, [rows[index] for index in again], max_new_tokens)):
        completions[index] = text
    return completions


def scores_by_budget(backend: Any, task: Any, rows: list[dict], budgets: list[int] = BUDGETS,
                     first: int | None = None) -> tuple[dict[int, Any], dict[int, float]]:
    """Accuracy per question with the answer cut at each budget, {budget: (questions,)}, and the share of answers
    that had ended (end of sequence) within each budget: one greedy generation at the largest budget, re-decoded
    at each smaller one (greedy decoding's first K tokens do not depend on the budget); with `first`, the long
    answers alone go to the largest budget (generate_long_last). A completion ended within a budget when its
    re-tokenized length is below it (one exactly at the budget counts as cut)."""
    import numpy as np

    completions = generate_long_last(backend, rows, max(budgets), first)
    ids = [backend.tokenizer(text, add_special_tokens=False)["input_ids"] for text in completions]
    scores, ended = {}, {}
    for budget in budgets:
        cut = [backend.tokenizer.decode(row[:budget], skip_special_tokens=True) for row in ids]
        scores[budget] = np.asarray(task.metric_values("accuracy", rows, cut), dtype=float)  # (questions,)
        ended[budget] = float(np.mean([len(row) < budget for row in ids]))
    return scores, ended


def measure(model: str, task_name: str, start_model: str, seed: int, with_retention: bool = True,
            questions: int | None = None) -> dict[str, Any]:
    """Held-out accuracy at every budget, scored at the largest (and the per-question scores there, for paired
    intervals against the start), the share of answers ended by each budget, plus retention, for a model
    directory or run directory; on the first `questions` held-out questions only, when given."""
    import torch

    from evotune.runs.loading import load_for_eval
    from evotune.tasks import get_task

    torch.manual_seed(0)
    keys = TASKS[task_name]["keys"]
    task = get_task(task_name, seed=HELDOUT_SEED, num_eval=8, **keys.get("task_args", {}))  # its metrics only
    rows = heldout_rows(task_name)[:questions]
    backend = load_for_eval(model, "float32", "cpu")
    scores, ended = scores_by_budget(backend, task, rows)
    result = {"n": len(rows), "scored_budget": SCORED_BUDGET,
              "accuracy": round(float(scores[SCORED_BUDGET].mean()), 4),
              "accuracy_by_budget": {str(budget): round(float(value.mean()), 4) for budget, value in scores.items()},
              "ended_by_budget": {str(budget): round(value, 4) for budget, value in ended.items()},
              "correct": "".join(str(int(value)) for value in scores[SCORED_BUDGET])}
    transfer = transfer_split(task_name)
    if transfer and questions is None:  # a smoke run's few questions score no transfer
        result["transfer"] = transfer_scores(backend, task, transfer)
    if with_retention:
        result["retention"] = {key: round(float(value), 5) for key, value in retention(backend, start_model,
                                                                                        seed).items()}
    return result

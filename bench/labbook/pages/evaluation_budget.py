"""Evaluation budget: at how many new tokens each task's answers stop being cut, and which numbers were scored on cut
answers (the base model at growing budgets, the stability study's trained models read again, the transfer split)."""

from __future__ import annotations

import re

from bench.claims._common import load
from bench.labbook.spec import StudyPage

BASE_FILE = "eval_budget/eval_budget_arithmetic.json"
TRAINED_FILE = "stability/stability_eval_budget_arithmetic.json"
TRANSFER_FILE = "eval_budget/transfer_budget.json"
FIRST_BUDGET = 10  # the budget the first arithmetic studies trained and scored with


def _accuracies() -> list[tuple[str, int, dict[int, float]]]:
    """(model, questions, {budget: accuracy}) for the base model and each of the stability study's trained models."""
    base = load(BASE_FILE)
    found = [("the base model", base["num_eval"], {row["max_new_tokens"]: row["accuracy"] for row in base["rows"]})]
    trained = load(TRAINED_FILE)
    questions = int(re.search(r"--num-eval (\d+)", trained["command"]).group(1))
    for name, model in trained["models"].items():
        accuracy = {int(budget): values["accuracy"] for budget, values in model["metrics"].items()}
        found.append((name, questions, accuracy))
    return found


def _settled(accuracy: dict[int, float], questions: int) -> int:
    """The smallest budget from which no larger budget moves the accuracy by more than one question."""
    budgets = sorted(accuracy)
    return next(budget for budget in budgets
                if all(abs(accuracy[later] - accuracy[budget]) <= 1 / questions + 1e-9
                       for later in budgets if later > budget))


def arithmetic_settles() -> str:
    """The budget from which every model's arithmetic accuracy stays within one question, against the task's own
    evaluation budget (the code's default): whether arithmetic's accuracies are scored on whole answers."""
    from evotune.tasks.arithmetic import EVAL_MAX_NEW_TOKENS

    found = _accuracies()
    settled = max(_settled(accuracy, questions) for _, questions, accuracy in found)
    place = ("sits there" if EVAL_MAX_NEW_TOKENS == settled else "sits past it" if EVAL_MAX_NEW_TOKENS > settled
             else "sits below it, so its accuracies are cut")
    base_largest = max(found[0][2])
    trained_largest = max(max(accuracy) for _, _, accuracy in found[1:])
    return (f"From {settled} new tokens on, no model's arithmetic accuracy moves by more than one question (the base "
            f"model up to {base_largest}, the stability study's {len(found) - 1} trained models up to "
            f"{trained_largest}): the task's evaluation budget, {EVAL_MAX_NEW_TOKENS}, {place}.")


def first_budget_cost() -> str:
    """Each model's accuracy at the first studies' 10 tokens against the task's budget: how many scored lower there
    by more than one question and by how much, and how many higher, the cost of a 10-token number."""
    from evotune.tasks.arithmetic import EVAL_MAX_NEW_TOKENS

    (base_name, base_questions, base), *trained = _accuracies()
    base_drop = base[EVAL_MAX_NEW_TOKENS] - base[FIRST_BUDGET]
    drops = [(accuracy[EVAL_MAX_NEW_TOKENS] - accuracy[FIRST_BUDGET], questions) for _, questions, accuracy in trained]
    lower = [drop for drop, questions in drops if drop > 1 / questions + 1e-9]
    higher = [drop for drop, questions in drops if drop < -1 / questions - 1e-9]
    text = (f"At {FIRST_BUDGET} new tokens, the first studies' budget, {base_name} scored {100 * base_drop:.1f} points "
            f"less than at {EVAL_MAX_NEW_TOKENS}, and {len(lower)} of the {len(trained)} trained models scored less "
            f"by more than one question")
    if lower:
        text += f" (by {100 * min(lower):.1f} to {100 * max(lower):.1f} points)"
    if higher:
        text += (f"; {len(higher)} scored more (by {'up to ' if len(higher) > 1 else ''}{-100 * min(higher):.1f} "
                 "points)")
    if base_drop > 1 / base_questions and len(lower) > len(trained) / 2:
        return text + f": a {FIRST_BUDGET}-token arithmetic accuracy under-measures most models."
    return text + "."


def transfer_settles() -> str:
    """The transfer split's scoring budget (the code's) against the smallest budget from which every phrasing scores
    what it scores at the largest, for the models the check read: whether the split's scores are cut."""
    from evotune.tasks.phrasings import TRANSFER_MAX_NEW_TOKENS

    data = load(TRANSFER_FILE)
    settled = data["smallest_budget_accuracy_stops_changing"]
    models = len(data["models"])
    read = "the base model only" if models == 1 else f"{models} models"
    place = ("at" if TRANSFER_MAX_NEW_TOKENS == settled else "past" if TRANSFER_MAX_NEW_TOKENS > settled
             else "below")
    return (f"The transfer split is scored at {TRANSFER_MAX_NEW_TOKENS} new tokens, {place} the {settled} from which "
            f"no phrasing's accuracy changes up to {max(data['budgets'])} (checked on {read}).")


CLAIMS = {"eval-budget-meaning-arithmetic": arithmetic_settles, "eval-budget-meaning-first": first_budget_cost,
          "eval-budget-meaning-transfer": transfer_settles}

PAGE = StudyPage(
    slug="evaluation-budget",
    order=10,
    title="Evaluation budget: which numbers were measured under truncation",
    short="which numbers were measured under truncation, and each task's evaluation budget",
    folder="eval_budget/",
    asked="""At how many new tokens does each task's answer stop being cut, and which of the lab book's
numbers were scored on cut answers?""",
    setup="""`bench/eval_budget/`: the base model on 256 test questions of each task, greedy, float32, one thread, at
growing budgets; for trained models, the stability study's ten final models read again at every budget
([Run-to-run stability](stability.md)); for the transfer split, the base model (and any trained model given to
`bench/eval_budget/transfer_budget.py`) on every phrasing, one greedy generation re-read at each budget. At 10 new
tokens, the budget the first studies trained and scored with, an answer written as "93 + 71 = 164" is cut to
"93 + 71 = 16".""",
    notes=("Evaluation has a budget of its own, `eval_max_new_tokens`, defaulting to the task's and never below "
           "training's `max_new_tokens`; the transfer split is scored at its own, larger budget.",),
    files=("eval_budget/*.json", TRAINED_FILE),
    results="""The base model on 2-digit addition: <!-- claim:eval-budget-arithmetic --><!-- /claim -->,
under-measured <!-- claim:eval-budget-ratio --><!-- /claim -->.
Trained models: <!-- claim:stability-budget-gain --><!-- /claim -->.
The transfer split: <!-- claim:transfer-budget --><!-- /claim -->.""",
    meaning=("eval-budget-meaning-arithmetic", "eval-budget-meaning-first", "eval-budget-meaning-transfer"),
    rerun="""`bash bench/eval_budget/eval_budget.sh arithmetic 256` (and `conciseness`, `ifeval`) writes
`bench/results/eval_budget/eval_budget_*.json`; `python -m bench.stability.stability_eval_budget RUNS --methods es
grpo --seeds 0 1 2 3 4` reads the stability runs again; `python -m bench.eval_budget.transfer_budget` checks the
transfer split; `python -m bench.labbook.render` renders this page from them.""",
    related="The other tasks' tables are on [All result tables](../benchmark-tables.md).",
)

"""How an arithmetic question is asked: the training template, the phrasings training may draw across, and the
transfer split, the same skill asked in ways no training run sees.

A held-out score in the training prompt's own wording measures the template as much as the skill: a model can learn
to answer "What is a + b? Reply with only the number." without learning to add. The transfer split asks what a run
learned in three ways it never trained on, each a group scored on its own:

- `other wordings`: the task's own operations and digits, in four phrasings that no run trains on
  (TRANSFER_PHRASINGS; the `phrasings` task argument draws training prompts from TRAINING_PHRASINGS only);
- `subtraction` (when the task does not train on it): the same digits, a >= b so no answer is negative, in the
  training template;
- `N-digit operands`: one more digit than the task's, its own operations, in the training template.

Every transfer question lies outside the task's train, test and validation questions.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from .base import prompt_text

TEMPLATE = "What is {a} {op} {b}? Reply with only the number."
WORDS = {"+": ("plus", "add", "sum"), "-": ("minus", "subtract", "difference"), "*": ("times", "multiply", "product")}

# Phrasings a training run may draw its prompts across (`phrasings: k` takes the first k; 1 is the template).
TRAINING_PHRASINGS: list[Callable[[int, str, int], str]] = [
    lambda a, op, b: TEMPLATE.format(a=a, op=op, b=b),
    lambda a, op, b: f"Compute {a} {op} {b}. Answer with just the result.",
    lambda a, op, b: f"{a} {WORDS[op][0]} {b} is what number?",
    lambda a, op, b: f"Find the {WORDS[op][2]} of {a} and {b}." if op != "-"
    else f"Find the difference {a} minus {b}.",
]
# Never used in training: the transfer split's "other wordings", by name (each row's `phrasing` column).
TRANSFER_PHRASINGS: dict[str, Callable[[int, str, int], str]] = {
    "calculate": lambda a, op, b: f"Calculate {a} {WORDS[op][0]} {b}.",
    "equation": lambda a, op, b: f"{a} {op} {b} = ?",
    "what do you get": lambda a, op, b: {"+": f"What do you get if you add {a} and {b}?",
                                         "-": f"What do you get if you subtract {b} from {a}?",
                                         "*": f"What do you get if you multiply {a} by {b}?"}[op],
    "imperative": lambda a, op, b: {"+": f"Add {a} and {b}, and give the result.",
                                    "-": f"Subtract {b} from {a}, and give the result.",
                                    "*": f"Multiply {a} by {b}, and give the result."}[op],
}
TRANSFER_PER_GROUP = 64  # questions per group: 64 x 3 = 192 on the default task (2-digit sums)
# New tokens a transfer answer may take: other wordings do not ask for "only the number", and the base model's answers
# to them run past the template's 48. At 192 every phrasing scores what it scores at 256 (at 128 "Calculate a plus b."
# scored 12% against 16%): bench/eval_budget/transfer_budget.py, bench/results/eval_budget/transfer_budget.json
TRANSFER_MAX_NEW_TOKENS = 192
# the budgets a study reads a transfer answer at (one generation at the largest, re-read at each): a trained model
# whose accuracy still changes past TRANSFER_MAX_NEW_TOKENS shows it
TRANSFER_BUDGETS = [64, 128, 192, 256]


def answer(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def row(a: int, op: str, b: int, phrasing: Callable[[int, str, int], str] = TRAINING_PHRASINGS[0]) -> dict:
    return {"prompt": [{"role": "user", "content": phrasing(a, op, b)}], "answer": str(answer(a, op, b))}


def transfer_row(a: int, op: str, b: int, phrasing: str = "template") -> dict:
    """A transfer question, its phrasing named in its `phrasing` column (the budget check reads it per phrasing)."""
    ask = TRAINING_PHRASINGS[0] if phrasing == "template" else TRANSFER_PHRASINGS[phrasing]
    return {**row(a, op, b, ask), "phrasing": phrasing}


def operand_range(digits: int) -> tuple[int, int]:
    return (1 if digits == 1 else 10 ** (digits - 1)), 10 ** digits - 1


def available_questions(low: int, high: int, operations: str, exclude: set, ordered: bool = False) -> int:
    """How many distinct (a, op, b) with operands in [low, high] (a >= b when `ordered`) lie outside `exclude`,
    counted exactly: `exclude` may hold questions of other operations or sizes, which take nothing from this space."""
    size = high - low + 1
    per_operation = size * (size + 1) // 2 if ordered else size * size
    taken = sum(1 for a, op, b in exclude
                if op in operations and low <= a <= high and low <= b <= high and (a >= b or not ordered))
    return per_operation * len(operations) - taken


def draw_questions(rng: random.Random, count: int, low: int, high: int, operations: str, exclude: set,
                   ordered: bool = False) -> list[tuple[int, str, int]]:
    """`count` distinct (a, op, b) outside `exclude`, operands drawn in [low, high] (swapped to a >= b when
    `ordered`); the caller checks that `count` exist (available_questions), or the draw would never end."""
    found: list[tuple[int, str, int]] = []
    seen = set(exclude)
    while len(found) < count:
        a, op, b = rng.randint(low, high), rng.choice(operations), rng.randint(low, high)
        if ordered and a < b:
            a, b = b, a
        if (a, op, b) not in seen:
            seen.add((a, op, b))
            found.append((a, op, b))
    return found


def _fresh(rng: random.Random, count: int, digits: int, operations: str, exclude: set,
           ordered: bool = False) -> list[tuple[int, str, int]]:
    """`count` distinct (a, op, b) of `digits`-digit operands outside `exclude` (a >= b when `ordered`), or as many
    as exist."""
    low, high = operand_range(digits)
    count = min(count, available_questions(low, high, operations, exclude, ordered))
    return draw_questions(rng, count, low, high, operations, exclude, ordered)


def transfer_rows(seed: int, digits: int, operations: str, exclude: set[tuple[int, str, int]],
                  per_group: int = TRANSFER_PER_GROUP) -> dict[str, list[dict]]:
    """{group: rows} of the transfer split of an arithmetic task (see the module's docstring); `exclude`: the task's
    train, test and validation questions."""
    rng = random.Random(f"arithmetic-transfer-{seed}")
    groups: dict[str, list[dict]] = {}
    wordings = _fresh(rng, per_group, digits, operations, exclude)
    names = list(TRANSFER_PHRASINGS)
    groups["other wordings"] = [transfer_row(*question, names[index % len(names)])
                                for index, question in enumerate(wordings)]
    if "-" not in operations:
        groups["subtraction"] = [transfer_row(*question) for question in _fresh(rng, per_group, digits, "-", set(),
                                                                                  ordered=True)]
    if digits < 9:
        groups[f"{digits + 1}-digit operands"] = [transfer_row(*question) for question in
                                                  _fresh(rng, per_group, digits + 1, operations, set())]
    return groups


def questions_of(rows: list[dict]) -> set[tuple[int, str, int]]:
    """The (a, op, b) questions of arithmetic rows in any phrasing: the first two numbers of the prompt, with every
    operation that gives the row's answer (2 + 2 and 2 * 2 both), so a set built from it excludes all of them."""
    found = set()
    for item in rows:
        written = [int(number) for number in re.findall(r"\d+", prompt_text(item["prompt"]))[:2]]
        if len(written) < 2:
            continue
        a, b = written
        found |= {(a, op, b) for op in WORDS if str(answer(a, op, b)) == str(item["answer"])}
    return found

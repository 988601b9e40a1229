"""Integer arithmetic ("What is 47 + 38?"): the smallest task with an exact, checkable answer.

It is the quick smoke test for a training setup: a small instruct model already gets part of
it right, so a working optimizer moves accuracy within a few dozen steps. Operands have exactly
``digits`` digits; train and eval are drawn from separate seeded streams and no eval question
appears in train, so eval accuracy measures generalisation rather than memorisation.
"""

from __future__ import annotations

import random
import re
from typing import Any

from ..errors import ConfigError
from .base import Task, completion_text
from .phrasings import (
    TRAINING_PHRASINGS,
    TRANSFER_MAX_NEW_TOKENS,
    available_questions,
    draw_questions,
    operand_range,
    row,
    transfer_rows,
)

OPERATIONS = "+-*"

# A number: optional minus, digits with optional thousands commas (1,234), optional decimals.
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def numbers(text: str) -> list[float]:
    """Every number written in text, in order (``"1,234"`` -> 1234.0, ``"-12."`` -> -12.0)."""
    return [float(match.replace(",", "")) for match in _NUMBER.findall(text)]


def last_number(text: str) -> float | None:
    """The last number written in text, or None."""
    found = numbers(text)
    return found[-1] if found else None


def arithmetic_reward(completions: list[Any], answer: list[Any], **kwargs: Any) -> list[float]:
    """1.0 when the last number in the completion equals the answer, else 0.0."""
    rewards = []
    for completion, expected in zip(completions, answer):
        value = last_number(completion_text(completion))
        rewards.append(1.0 if value is not None and value == float(expected) else 0.0)
    return rewards


def arithmetic_digit_reward(completions: list[Any], answer: list[Any], **kwargs: Any) -> list[float]:
    """Partial credit, a denser signal than exact match: the share of digit positions (aligned from the
    units) where the last number of the completion agrees with the answer, over the longer of the two
    (a wrong length costs its extra positions; a sign mismatch scores 0). 1.0 exactly when the answer is
    right; 0.0 with no number."""
    rewards = []
    for completion, expected in zip(completions, answer):
        value = last_number(completion_text(completion))
        target = int(float(expected))
        if value is None or value != int(value) or (value < 0) != (target < 0):
            rewards.append(0.0)
            continue
        written, wanted = str(abs(int(value)))[::-1], str(abs(target))[::-1]  # units first
        matches = sum(a == b for a, b in zip(written, wanted))
        rewards.append(matches / max(len(written), len(wanted)))
    return rewards


REWARDS = {"exact": arithmetic_reward, "digits": arithmetic_digit_reward}


def _draw(rng: random.Random, count: int, low: int, high: int, operations: str,
          exclude: set[tuple[int, str, int]]) -> list[tuple[int, str, int]]:
    """``count`` distinct (a, op, b) triples not in ``exclude``."""
    if count > available_questions(low, high, operations, exclude):
        space = (high - low + 1) ** 2 * len(operations)
        raise ConfigError(
            f"arithmetic: only {space} distinct questions exist for these `digits` and `operations` but "
            f"{count + len(exclude)} were requested (train + eval); lower `num_train`/`num_eval` or raise `digits`."
        )
    return draw_questions(rng, count, low, high, operations, exclude)


# Held-out answers need more tokens than the 10 a short training budget gives: SmolLM2 writes "93 + 71 = 164".
# Base accuracy on 256 test questions (bench/eval_budget/eval_budget.sh):
# 8.2% at 10 new tokens, 23.0% at 16 to 32. Trained
# models can answer at greater length ("The answer is 169, but ... 83 + 86 = 169."): two of the stability study's
# ES runs scored 22.9% and 17.0% at 24 tokens but 30.7% and 31.3% at 48, where all ten of its final models had
# stopped changing up to 128 (bench/stability/stability_eval_budget.py).
EVAL_MAX_NEW_TOKENS = 48


def build_arithmetic(*, seed: int = 0, num_eval: int | None = None, digits: int = 2, operations: str = "+",
                     num_train: int = 2000, reward: str = "exact", eval_split: str = "test",
                     phrasings: int = 1) -> Task:
    """Questions ``a op b`` with ``digits``-digit operands; ``operations`` is a string of ``+-*``.

    ``reward``: what training optimizes, ``exact`` (1 or 0) or ``digits`` (partial credit per digit,
    arithmetic_digit_reward); the held-out ``accuracy`` is exact match either way.
    ``eval_split``: ``test`` (the held-out set results are reported on) or ``validation``, a third set
    disjoint from test and train, for choosing settings (`evotune sweep`) without touching the test set.
    ``phrasings``: how many ways training asks its questions, drawn per question (1: the template "What is a + b?
    Reply with only the number." alone; up to 4, tasks/phrasings.py). Held-out questions keep the template; the
    task's transfer split (``Task.transfer_rows``) asks in wordings, operations and sizes no training sees."""
    if eval_split not in ("test", "validation"):
        raise ConfigError(f"arithmetic: `eval_split` is {eval_split!r}; set test (report results) or validation "
                          "(choose settings, e.g. in `evotune sweep`).")
    if reward not in REWARDS:
        raise ConfigError(f"arithmetic: `reward` is {reward!r}; set it to one of {', '.join(REWARDS)} (task_args: "
                          "{reward: digits} gives partial credit per digit; accuracy stays exact match).")
    if not isinstance(digits, int) or isinstance(digits, bool) or not 1 <= digits <= 9:
        raise ConfigError(f"arithmetic: `digits` must be an integer from 1 to 9, got {digits!r}.")
    operations = str(operations)
    if not operations or any(op not in OPERATIONS for op in operations):
        raise ConfigError(f"arithmetic: `operations` must be a non-empty string of characters from "
                          f"{OPERATIONS!r} (e.g. '+-'), got {operations!r}.")
    operations = "".join(sorted(set(operations), key=OPERATIONS.index))
    if not isinstance(phrasings, int) or isinstance(phrasings, bool) or not 1 <= phrasings <= len(TRAINING_PHRASINGS):
        raise ConfigError(f"arithmetic: `phrasings` must be an integer from 1 (the template alone) to "
                          f"{len(TRAINING_PHRASINGS)}, got {phrasings!r}.")
    num_eval = 128 if num_eval is None else num_eval
    for key, value in (("num_train", num_train), ("num_eval", num_eval)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"arithmetic: `{key}` must be a non-negative integer, got {value!r}.")
    low, high = operand_range(digits)
    # Eval comes from its own stream so it does not change with num_train; train then excludes it.
    test_triples = _draw(random.Random(f"arithmetic-eval-{seed}"), num_eval, low, high, operations, set())
    held_out = set(test_triples)
    eval_triples = test_triples
    if eval_split == "validation":  # same size as test, disjoint from it; train excludes both
        eval_triples = _draw(random.Random(f"arithmetic-validation-{seed}"), num_eval, low, high, operations, held_out)
        held_out |= set(eval_triples)
    train_triples = _draw(random.Random(f"arithmetic-train-{seed}"), num_train, low, high, operations, held_out)
    # each training question in one of the first `phrasings` wordings (its own stream: phrasings 1 draws nothing, so
    # the template-only task's rows are what they always were)
    wording = random.Random(f"arithmetic-phrasings-{seed}")
    train_rows = [row(*t, TRAINING_PHRASINGS[wording.randrange(phrasings)] if phrasings > 1 else TRAINING_PHRASINGS[0])
                  for t in train_triples]
    return Task(name="arithmetic", train_rows=train_rows,
                eval_rows=[row(*t) for t in eval_triples], reward_fns=[REWARDS[reward]],
                reward_weights=[1.0], metric_fns={"accuracy": arithmetic_reward},
                eval_max_new_tokens=EVAL_MAX_NEW_TOKENS,
                transfer_rows=transfer_rows(seed, digits, operations, held_out | set(train_triples)),
                transfer_max_new_tokens=TRANSFER_MAX_NEW_TOKENS)

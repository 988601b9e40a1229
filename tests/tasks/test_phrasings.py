"""The arithmetic task's phrasings and transfer split: the same skill asked in ways no training run sees, disjoint
from every question the task trains or is scored on."""

from __future__ import annotations

import re

import pytest

from evotune.errors import ConfigError
from evotune.tasks import get_task
from evotune.tasks.phrasings import TRAINING_PHRASINGS, TRANSFER_PER_GROUP, TRANSFER_PHRASINGS, transfer_rows

QUESTION = re.compile(r"(\d+)\D+?(\d+)")


def text(row: dict) -> str:
    return row["prompt"][0]["content"]


def operands(row: dict) -> tuple[int, int]:
    a, b = QUESTION.search(text(row)).groups()
    return int(a), int(b)


def phrasing_of(row: dict) -> int:
    """Which training phrasing asked `row`."""
    a, b = operands(row)
    [index] = [index for index, phrasing in enumerate(TRAINING_PHRASINGS) if phrasing(a, "+", b) == text(row)]
    return index


def test_the_transfer_split_asks_what_training_never_does():
    task = get_task("arithmetic", seed=3, num_eval=128)
    groups = task.transfer_rows
    assert list(groups) == ["other wordings", "subtraction", "3-digit operands"]
    assert all(len(rows) == 64 for rows in groups.values())
    # other wordings: each of the four transfer phrasings, none of them the template nor any training phrasing
    wordings = groups["other wordings"]
    assert {row["phrasing"] for row in wordings} == set(TRANSFER_PHRASINGS)
    training_texts = {phrasing(12, "+", 34) for phrasing in TRAINING_PHRASINGS}
    assert not training_texts & {phrasing(12, "+", 34) for phrasing in TRANSFER_PHRASINGS.values()}
    # their sums are questions the task neither trains nor scores on
    seen = {operands(row) for row in task.train_rows + task.eval_rows}
    assert not seen & {operands(row) for row in wordings}
    assert all(int(row["answer"]) == sum(operands(row)) for row in wordings)
    # subtraction in the template, never negative; one more digit in the template
    assert all(" - " in text(row) and int(row["answer"]) >= 0 for row in groups["subtraction"])
    assert all(a >= 100 and b >= 100 for a, b in map(operands, groups["3-digit operands"]))
    assert all(text(row).endswith("Reply with only the number.") for row in groups["3-digit operands"])
    assert task.transfer_max_new_tokens > task.eval_max_new_tokens  # other wordings answer at more length


def test_a_task_that_trains_on_subtraction_has_no_subtraction_group():
    groups = get_task("arithmetic", seed=0, operations="+-", digits=9, num_eval=8, num_train=8).transfer_rows
    assert list(groups) == ["other wordings"]  # 9 digits: no 10-digit group either
    assert {row["phrasing"] for row in groups["other wordings"]} == set(TRANSFER_PHRASINGS)


def test_training_draws_across_the_first_k_phrasings_and_scores_in_the_template():
    template = get_task("arithmetic", seed=1, num_eval=64)
    mixed = get_task("arithmetic", seed=1, num_eval=64, phrasings=4)
    assert all(text(row).startswith("What is ") for row in template.train_rows)
    assert [operands(row) for row in mixed.train_rows] == [operands(row) for row in template.train_rows]
    assert {phrasing_of(row) for row in mixed.train_rows} == {0, 1, 2, 3}
    assert mixed.eval_rows == template.eval_rows  # the held-out score stays in the template
    assert mixed.transfer_rows == template.transfer_rows
    two = get_task("arithmetic", seed=1, num_eval=64, phrasings=2)
    assert {phrasing_of(row) for row in two.train_rows} == {0, 1}


@pytest.mark.parametrize("value", [0, 5, "2", True])
def test_a_bad_phrasings_value_names_the_range(value):
    with pytest.raises(ConfigError, match="`phrasings` must be an integer from 1"):
        get_task("arithmetic", phrasings=value)


def test_a_one_digit_task_gets_every_subtraction_question_there_is_and_the_draw_ends():
    """One-digit operands give 45 ordered differences (a >= b), fewer than a group's 64: the group holds all 45
    (the draw counted what exists; it used to loop forever looking for a 46th)."""
    groups = transfer_rows(0, 1, "+", set())
    subtraction = {operands(row) for row in groups["subtraction"]}
    assert len(groups["subtraction"]) == len(subtraction) == 45 and all(a >= b for a, b in subtraction)
    assert len(groups["other wordings"]) == TRANSFER_PER_GROUP


def test_available_questions_counts_only_the_space_it_draws_from():
    from evotune.tasks.phrasings import available_questions

    # 9 x 9 one-digit sums; excluded: one of them, one product and one two-digit sum (neither in the space)
    assert available_questions(1, 9, "+", {(2, "+", 3), (2, "*", 3), (12, "+", 3)}) == 80
    assert available_questions(1, 9, "-", set(), ordered=True) == 45
    assert available_questions(1, 9, "-", {(3, "-", 5)}, ordered=True) == 45  # a < b: not an ordered question

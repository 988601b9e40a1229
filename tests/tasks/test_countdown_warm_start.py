"""Countdown in small form: easy instances through task args, and the solver's solutions as SFT targets."""

from __future__ import annotations

import pytest

from evotune.tasks import countdown_reward, get_task
from evotune.tasks.countdown import countdown_format_reward


@pytest.mark.parametrize("args", [dict(min_numbers=3, max_numbers=3, max_number=10, max_target=30),
                                  dict(min_numbers=2, max_numbers=2, max_number=9, max_target=20)])
def test_easy_instances_follow_their_task_args_and_are_solvable(args):
    task = get_task("countdown", seed=3, num_train=50, num_eval=10, **args)
    for row in task.train_rows + task.eval_rows:
        assert args["min_numbers"] <= len(row["numbers"]) <= args["max_numbers"]
        assert all(1 <= n <= args["max_number"] for n in row["numbers"]) and 1 <= row["target"] <= args["max_target"]


def test_solutions_score_full_reward_and_the_format_is_detected():
    task = get_task("countdown", seed=1, num_train=50, num_eval=10, min_numbers=3, max_numbers=3, max_number=10,
                    max_target=30)
    rows = task.train_rows
    solutions = [row["solution"] for row in rows]
    rewards = countdown_reward(solutions, [row["numbers"] for row in rows], [row["target"] for row in rows])
    assert rewards == [pytest.approx(1.1)] * len(rows)  # format 0.1 + correct answer 1.0, for every instance
    assert countdown_format_reward(["<answer>1 + 2</answer>", "<think>x</think> 3", "</think><answer>3</answer>"]) == \
        [0.0, 0.0, 1.0]


def test_the_reward_reads_the_completion_not_the_solution_column():
    task = get_task("countdown", seed=0, num_train=2, num_eval=1, max_numbers=3)
    row = task.train_rows[0]
    assert task.rewards([row], ["no answer here"])[0] == 0.0  # the row's own `solution` column is never scored
    assert task.rewards([row], [row["solution"]])[0] == pytest.approx(1.1)

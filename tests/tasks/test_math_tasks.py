"""gsm8k and math: answers checked by math-verify on hand-written tricky cases, data loading and bad rows."""

from __future__ import annotations

import json

import pytest

from evotune.errors import ConfigError, DataError
from evotune.tasks import get_task, math_answer_reward
from evotune.tasks.math_answers import gsm8k_gold, last_boxed


@pytest.mark.parametrize("completion, gold, expected", [
    ("So she makes \\boxed{18} dollars.", "18", 1.0),
    ("The answer is \\boxed{18}.", "19", 0.0),
    ("\\boxed{\\frac{1}{2}}", "0.5", 1.0),  # fraction vs decimal
    ("Half of it: \\boxed{0.5}", "\\frac{1}{2}", 1.0),
    ("\\boxed{\\boxed{3}}", "3", 1.0),  # nested boxes
    ("The total is \\boxed{1,234}.", "1234", 1.0),  # thousands comma
    ("It is \\boxed{5 \\text{ cm}} long.", "5", 1.0),  # units
    ("Final: \\boxed{\\dfrac{3}{4}}", "\\frac{3}{4}", 1.0),
    ("I think it is 7, no wait, the answer is 12", "12", 1.0),  # no box: the last expression
    ("I cannot solve this.", "42", 0.0),
    ("", "42", 0.0),
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", 1.0),  # symbolic equality
    ("\\boxed{x = 5}", "5", 1.0),
])
def test_math_verify_reward_on_tricky_formats(completion, gold, expected):
    assert math_answer_reward(completions=[completion], answer=[gold]) == [expected]


def test_chat_completions_are_scored_like_strings():
    chat = [[{"role": "assistant", "content": "\\boxed{7}"}]]
    assert math_answer_reward(completions=chat, answer=["7"]) == [1.0]


@pytest.mark.parametrize("text, expected", [
    ("He pays 2 * 3 = 6\n#### 6", "6"),
    ("Total = <<1000+234=1234>>1234\n#### 1,234", "1234"),
    ("#### -3", "-3"),
    ("no marker here", None),
])
def test_gsm8k_gold_answer(text, expected):
    assert gsm8k_gold(text) == expected


def test_last_boxed_balances_braces():
    assert last_boxed("first \\boxed{1} then \\boxed{\\frac{1}{\\sqrt{2}}} end") == "\\frac{1}{\\sqrt{2}}"
    assert last_boxed("no box") is None
    assert last_boxed("\\boxed{unclosed") is None


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_gsm8k_loads_files_splits_and_skips_unparsable_gold(tmp_path):
    rows = [{"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"} for i in range(20)]
    rows[3]["answer"] = "the marker is missing"  # unparsable gold: skipped, counted
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    with pytest.warns(UserWarning, match="row 4"):
        task = get_task("gsm8k", dataset=train, num_eval=5, seed=1)
    assert task.skipped_rows == 1
    assert len(task.eval_rows) == 5 and len(task.train_rows) == 14
    assert not {r["question"] for r in task.eval_rows} & {r["question"] for r in task.train_rows}
    system, user = task.eval_rows[0]["prompt"]
    assert "\\boxed{}" in system["content"] and user["role"] == "user"
    row = task.eval_rows[0]
    metrics = task.evaluate([row], [f"\\boxed{{{row['answer']}}}"])
    assert metrics["accuracy"] == 1.0 and metrics["boxed"] == 1.0
    again = get_task("gsm8k", dataset=train, num_eval=5, seed=1)
    assert [r["question"] for r in again.eval_rows] == [r["question"] for r in task.eval_rows]  # seeded split


def test_gsm8k_with_the_shared_test_file_and_an_eval_dataset(tmp_path):
    from pathlib import Path

    test_file = Path(__file__).resolve().parents[3] / "shared" / "data" / "gsm8k" / "test.jsonl"
    if not test_file.exists():
        pytest.skip("../shared/data/gsm8k is not beside this checkout")
    task = get_task("gsm8k", dataset=str(test_file), eval_dataset=str(test_file), num_eval=200)
    assert len(task.eval_rows) == 200 and task.skipped_rows == 0
    assert task.eval_rows[0]["answer"] == "18"  # Janet's ducks


def test_gsm8k_rows_carry_a_worked_solution_in_the_rewarded_format(tmp_path):
    """SFT on gsm8k learns from `solution` (steps + \\boxed{}), not the bare gold number."""
    from evotune.sft import SFTConfig, sft_rows

    answer = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nShe sold 48+24 = <<48+24=72>>72 in all.\n#### 1,072"
    train = write_jsonl(tmp_path / "train.jsonl", [{"question": f"Q{i}?", "answer": answer} for i in range(4)]
                        + [{"question": "Bare?", "answer": "7"}])
    held_out = write_jsonl(tmp_path / "test.jsonl", [{"question": f"T{i}?", "answer": answer} for i in range(2)]
                           + [{"question": "Bare?", "answer": "7"}])
    task = get_task("gsm8k", dataset=train, eval_dataset=held_out, num_eval=3)
    worked = [row for row in task.eval_rows if row["question"] != "Bare?"]
    assert worked[0]["solution"] == ("Natalia sold 48/2 = 24 clips in May.\nShe sold 48+24 = 72 in all.\n"
                                     "The answer is \\boxed{1072}.")
    assert task.evaluate(worked, [row["solution"] for row in worked]) == {"reward": 1.0, "accuracy": 1.0, "boxed": 1.0}
    assert "solution" not in next(row for row in task.eval_rows if row["question"] == "Bare?")
    rows, _ = sft_rows(SFTConfig(task="gsm8k", task_args={"dataset": train, "eval_dataset": held_out}, num_eval=3))
    assert sorted(row["completion"] for row in rows) == ["7", *[worked[0]["solution"]] * 4]


def test_bad_rows_name_the_file_row_and_column(tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"question": "ok?", "answer": "#### 1"}, {"text": "no question"}])
    with pytest.raises(DataError, match=r"bad.jsonl.*row 2.*'question'"):
        get_task("gsm8k", dataset=bad, num_eval=1)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match="empty"):
        get_task("gsm8k", dataset=str(empty))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"question": "a", "answer": "#### 1"}\n{not json\n')
    with pytest.raises(DataError, match="line 2"):
        get_task("gsm8k", dataset=str(broken))


def test_math_task_reads_answer_or_boxed_solution(tmp_path):
    rows = [{"problem": "Compute 1/2 + 1/4.", "solution": "We get $\\boxed{\\frac{3}{4}}$."},
            {"problem": "What is 2^10?", "answer": "1024"},
            {"problem": "Unanswerable", "solution": "no boxed answer here"},  # skipped
            {"problem": "x?", "answer": "5"}]
    data = write_jsonl(tmp_path / "math.jsonl", rows)
    with pytest.warns(UserWarning, match="row 3"):
        task = get_task("math", dataset=data, eval_dataset=data)
    assert [r["answer"] for r in task.eval_rows] == ["\\frac{3}{4}", "1024", "5"]
    assert task.skipped_rows == 2  # once in train, once in eval
    assert task.evaluate(task.eval_rows, ["\\boxed{0.75}", "\\boxed{1000}", "5"])["accuracy"] == pytest.approx(2 / 3)
    with pytest.raises(DataError, match="needs `dataset`"):
        get_task("math")


def test_builtin_tasks_refuse_a_dataset_they_do_not_read(tmp_path):
    with pytest.raises(ConfigError, match="not used by task 'arithmetic'"):
        get_task("arithmetic", dataset="x.jsonl")

"""Tests for evotune.tasks: reward functions on hand-written cases, generators, Task glue and errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from evotune.errors import ConfigError, DataError, RewardFunctionError
from evotune.tasks import (
    TASKS,
    Task,
    arithmetic_reward,
    completion_text,
    conciseness_reward,
    countdown_answer_reward,
    countdown_format_reward,
    countdown_reward,
    get_task,
    prompt_text,
    solve,
)
from evotune.tasks.arithmetic import last_number, numbers
from evotune.tasks.conciseness import contains_solution, exact_match, questions
from evotune.tasks.countdown import evaluate_expression


def chat(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


# --- helpers -------------------------------------------------------------------------------------

def test_completion_and_prompt_text():
    assert completion_text("plain") == "plain"
    assert completion_text([{"role": "assistant", "content": "hi"}]) == "hi"
    assert completion_text([{"role": "assistant", "content": "a"}, {"role": "user", "content": "u"},
                            {"role": "assistant", "content": "b"}]) == "b"
    assert prompt_text("q") == "q"
    assert prompt_text([{"role": "system", "content": "s"}, {"role": "user", "content": "question"}]) == "question"


# --- arithmetic ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text, answer, expected", [
    ("The answer is 85", "85", 1.0),
    ("85.", "85", 1.0),
    ("-12", "-12", 1.0),
    ("1,234", "1234", 1.0),
    ("40 + 45 = 85", "85", 1.0),
    ("I think 85, no wait, 86", "85", 0.0),
    ("The answer is 84", "85", 0.0),
    ("12", "-12", 0.0),
    ("no number here", "85", 0.0),
])
def test_arithmetic_reward(text, answer, expected):
    assert arithmetic_reward(completions=[text], answer=[answer]) == [expected]
    assert arithmetic_reward(completions=[[{"role": "assistant", "content": text}]], answer=[answer]) == [expected]


def test_numbers_reads_every_number_in_order_and_the_reward_scores_the_last():
    assert numbers("The answer is 1,234, not -12. or 3.5") == [1234.0, -12.0, 3.5]
    assert numbers("no number") == [] and last_number("no number") is None
    assert last_number("85, no wait, 86") == 86.0  # a right sum followed by another number scores as wrong


@pytest.mark.parametrize("text, answer, expected", [
    ("85", "85", 1.0),
    ("The answer is 84", "85", 0.5),      # units wrong, tens right
    ("75", "85", 0.5),
    ("185", "85", 2 / 3),                 # the extra hundreds digit costs a position
    ("5", "85", 0.5),
    ("58", "85", 0.0),
    ("-85", "85", 0.0),                   # wrong sign
    ("85.5", "85", 0.0),                  # not an integer
    ("no number", "85", 0.0),
    ("1,234", "1234", 1.0),
])
def test_arithmetic_digit_reward_gives_partial_credit(text, answer, expected):
    from evotune.tasks.arithmetic import arithmetic_digit_reward

    assert arithmetic_digit_reward(completions=[text], answer=[answer]) == [pytest.approx(expected)]


def test_arithmetic_digits_reward_trains_on_partial_credit_but_accuracy_stays_exact():
    task = get_task("arithmetic", seed=0, num_eval=4, reward="digits")
    rows = task.eval_rows
    almost = [str(int(row["answer"]) + 1 if int(row["answer"]) % 10 != 9 else int(row["answer"]) - 1) for row in rows]
    metrics = task.evaluate(rows, almost)  # every units digit wrong, every tens digit right
    assert metrics["accuracy"] == 0.0 and 0.3 < metrics["reward"] < 0.7
    with pytest.raises(ConfigError, match="exact, digits"):
        get_task("arithmetic", reward="partial")


def test_arithmetic_rows_and_answers():
    task = get_task("arithmetic", seed=3, num_eval=20, digits=3, operations="+-*", num_train=300)
    assert len(task.train_rows) == 300 and len(task.eval_rows) == 20
    for row in task.train_rows + task.eval_rows:
        a, op, b = row["prompt"][0]["content"].removeprefix("What is ").split("?")[0].split()
        assert 100 <= int(a) <= 999 and 100 <= int(b) <= 999 and op in "+-*"
        assert int(row["answer"]) == {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
    correct = [row["answer"] for row in task.eval_rows]
    assert task.evaluate(task.eval_rows, correct) == {"reward": 1.0, "accuracy": 1.0}


def test_arithmetic_validation_split_is_disjoint_from_test_and_train():
    def questions(rows):
        return {row["prompt"][0]["content"] for row in rows}

    test = get_task("arithmetic", seed=1, num_eval=200, num_train=500)
    validation = get_task("arithmetic", seed=1, num_eval=200, num_train=500, eval_split="validation")
    assert len(validation.eval_rows) == 200 and len(validation.train_rows) == 500
    # settings chosen on validation never saw a test question, in training or in evaluation
    assert not questions(validation.eval_rows) & questions(test.eval_rows)
    assert not questions(validation.train_rows) & (questions(test.eval_rows) | questions(validation.eval_rows))
    with pytest.raises(ConfigError, match="eval_split"):
        get_task("arithmetic", eval_split="dev")


def test_arithmetic_bad_args():
    with pytest.raises(ConfigError, match="operations"):
        get_task("arithmetic", operations="/")
    with pytest.raises(ConfigError, match="distinct questions"):
        get_task("arithmetic", digits=1, num_train=1000)


# --- countdown -----------------------------------------------------------------------------------

@pytest.mark.parametrize("numbers, target", [([3, 5, 7], 22), ([1, 5, 5, 5], 24), ([3, 3, 8, 8], 24),
                                             ([25, 50, 75, 100], 125), ([2, 3], 6)])
def test_solver_finds_valid_solutions(numbers, target):
    expression = solve(numbers, target)
    assert expression is not None
    assert evaluate_expression(expression) == target
    assert countdown_answer_reward([f"<answer>{expression}</answer>"], [numbers], [target]) == [1.0]


def test_solver_reports_unsolvable():
    assert solve([1, 1, 1], 100) is None
    assert solve([2, 2], 5) is None


def test_generated_countdown_instances_are_solvable():
    task = get_task("countdown", seed=5, num_train=200, num_eval=30)
    assert len(task.train_rows) == 200 and len(task.eval_rows) == 30
    for row in task.train_rows + task.eval_rows:
        assert 3 <= len(row["numbers"]) <= 4 and all(1 <= n <= 99 for n in row["numbers"])
        assert 1 <= row["target"] <= 999
        expression = solve(row["numbers"], row["target"])
        assert expression is not None and abs(evaluate_expression(expression) - row["target"]) < 1e-9
        system, user = row["prompt"]
        assert system["role"] == "system" and user["role"] == "user"
        assert f"Using the numbers {row['numbers']}, create an equation that equals {row['target']}." in user["content"]


NUMS, TARGET = [3, 5, 7], 22


@pytest.mark.parametrize("completion, expected", [
    ("<think>3*5=15, 15+7=22</think>\n<answer> 3 * 5 + 7 </answer>", 1.1),
    ("3*5 is 15 and add 7</think> <answer>(3 * 5) + 7</answer>", 1.1),   # opening <think> prefilled
    ("<think>hmm</think><answer>3 * 5 + 7 + 1</answer>", 0.1),            # right format, wrong value, extra number
    ("<think>hmm</think><answer>3 + 5 + 7</answer>", 0.1),                # right format, wrong value
    ("<think>x</think><answer>5 * 3 + 7 - 7 + 7</answer>", 0.1),          # reuses 7
    ("<think>x</think><answer>22</answer>", 0.1),                         # uses no numbers
    ("<think>x</think><answer>3 * 7 + 1</answer>", 0.1),                  # 5 unused
    ("The answer is 3 * 5 + 7 = 22", 0.0),                                # no tags at all
    ("<answer>3 * 5 + 7</answer>", 1.0),                                  # correct but no </think>
    ("<think>x</think><answer>3 * 5 + 7 = 22</answer>", 0.1),             # '=' is not allowed
    ("<think>x</think><answer>__import__('os').system('echo 22')</answer>", 0.1),
    ("<think>x</think><answer>3 ** 5 + 7</answer>", 0.1),                 # power is not allowed
    ("<think>x</think><answer>3 * 5 + 7 / 0</answer>", 0.1),              # division by zero
    ("<think>a</think><answer>1</answer> then <answer>7 + 3 * 5</answer>", 1.1),  # last block counts
])
def test_countdown_reward(completion, expected):
    assert countdown_reward([completion], [NUMS], [TARGET]) == [pytest.approx(expected)]


def test_countdown_reward_ignores_the_prompt():
    task = get_task("countdown", seed=0, num_train=1, num_eval=1)
    row = task.eval_rows[0]
    # The prompt contains an <answer> example and </think>; a bare completion must still score 0.
    assert "</answer>" in row["prompt"][1]["content"]
    assert task.rewards([row], ["I don't know"]).tolist() == [0.0]
    answer = solve(row["numbers"], row["target"])
    assert task.rewards([row], [f"<think>ok</think><answer>{answer}</answer>"]).tolist() == [pytest.approx(1.1)]
    assert task.evaluate([row], [f"</think><answer>{answer}</answer>"]) == {
        "reward": pytest.approx(1.1), "accuracy": 1.0, "format": 1.0}


def test_countdown_format_and_answer_parts():
    assert countdown_format_reward(["<think>a</think>\n\n<answer>b</answer>", "<answer>b</answer>"]) == [1.0, 0.0]
    assert countdown_answer_reward(["<answer>(7 - 5) * 11</answer>"], [[5, 7, 11]], [22]) == [1.0]
    assert countdown_answer_reward(["<answer>7 / 2 * 4</answer>"], ["[7, 2, 4]"], [14]) == [1.0]
    assert evaluate_expression("(1 + 2) / 3") == 1
    assert evaluate_expression("abs(-3)") is None


# --- conciseness ---------------------------------------------------------------------------------

def test_conciseness_reward_and_metrics():
    assert conciseness_reward(["Paris", "  Paris.  ", "The capital of France is Paris."],
                              solution=["Paris"] * 3) == [0.0, -1.0, -26.0]
    assert exact_match(["Paris.", "paris", "It is Paris"], solution=["Paris"] * 3) == [1.0, 1.0, 0.0]
    assert contains_solution(["It is PARIS", "London"], solution=["Paris"] * 2) == [1.0, 0.0]
    task = get_task("conciseness", seed=1)
    assert len(task.eval_rows) == 64 and len(task.train_rows) == len(questions()) - 64
    rows = task.eval_rows[:2]
    metrics = task.evaluate(rows, [rows[0]["solution"], rows[1]["solution"] + " is the answer"])
    assert metrics["reward"] == pytest.approx(-len(" is the answer") / 2)
    assert metrics["exact"] == 0.5 and metrics["contains_solution"] == 1.0
    assert metrics["length"] == pytest.approx((len(rows[0]["solution"]) * 2 + len(" is the answer")) / 2)


def test_conciseness_dataset_size():
    pairs = questions()
    assert len(pairs) >= 150 and len({q for q, _ in pairs}) == len(pairs)
    assert all(0 < len(s) <= 20 for _, s in pairs)


# --- determinism and splits ----------------------------------------------------------------------

@pytest.mark.parametrize("name, args", [("arithmetic", {"num_train": 200}), ("countdown", {"num_train": 100}),
                                        ("conciseness", {})])
def test_determinism_and_disjoint_splits(name, args):
    first, again, other = (get_task(name, seed=s, num_eval=32, **args) for s in (7, 7, 8))
    assert first.train_rows == again.train_rows and first.eval_rows == again.eval_rows
    assert first.train_rows != other.train_rows and first.eval_rows != other.eval_rows

    def key(r):
        return json.dumps(r["prompt"])

    assert not {key(r) for r in first.train_rows} & {key(r) for r in first.eval_rows}
    assert len({key(r) for r in first.train_rows}) == len(first.train_rows)


# --- Task glue -----------------------------------------------------------------------------------

def test_rewards_weights_skipping_and_trl_completion_format():
    seen = {}

    def length_reward(prompts, completions, answer, **kwargs):
        seen["completions"], seen["answer"] = completions, answer
        return [float(len(completion_text(c))) for c in completions]

    def only_even(prompts, completions, answer, **kwargs):
        return [1.0 if int(a) % 2 == 0 else None for a in answer]

    rows = [{"prompt": "string prompt", "answer": "2"}, {"prompt": chat("chat prompt"), "answer": "3"}]
    task = Task("t", rows, rows, [length_reward, only_even], [2.0, 10.0])
    rewards = task.rewards(rows, ["abc", "hello"])
    assert rewards.dtype == np.float64 and rewards.tolist() == [2.0 * 3 + 10.0, 2.0 * 5]
    assert seen["completions"] == ["abc", [{"role": "assistant", "content": "hello"}]]
    assert seen["answer"] == ["2", "3"]

    skip_all = Task("t", rows, rows, [only_even], [1.0], metric_fns={"even": only_even})
    rewards = skip_all.rewards(rows, ["x", "y"])
    assert rewards[0] == 1.0 and math.isnan(rewards[1])
    assert skip_all.evaluate(rows, ["x", "y"]) == {"reward": 1.0, "even": 1.0, "skipped": 1.0}


def _rows():
    return [{"prompt": chat("What is the airspeed of an unladen swallow?"), "answer": "24"}]


def test_raising_reward_fn_names_function_and_prompt():
    def broken_reward(prompts, completions, **kwargs):
        raise KeyError("solution")

    with pytest.raises(RewardFunctionError) as info:
        Task("t", [], [], [broken_reward], [1.0]).rewards(_rows(), ["x"])
    message = str(info.value)
    assert "broken_reward" in message and "KeyError" in message and "unladen swallow" in message
    assert "None" in message
    assert isinstance(info.value.__cause__, KeyError)


def test_a_reward_that_calls_sys_exit_is_reported_as_the_rewards_error():
    """sys.exit() inside a reward ended the run with that code and no message; it is the reward's error instead."""
    def exiting_reward(prompts, completions, **kwargs):
        raise SystemExit(3)

    with pytest.raises(RewardFunctionError, match=r"exiting_reward raised SystemExit: 3 .*unladen swallow"):
        Task("t", [], [], [exiting_reward], [1.0]).rewards(_rows(), ["x"])


@pytest.mark.parametrize("returned, pattern", [
    ([float("nan")], "nan.*index 0.*unladen swallow"),
    ([float("inf")], "inf.*index 0"),
    (["1.0"], "not a number.*unladen swallow"),
    ([1.0, 2.0], "2 values for 1 completions"),
    (1.0, "not a list"),
])
def test_bad_reward_values(returned, pattern):
    task = Task("t", [], [], [lambda prompts, completions, **kw: returned], [1.0])
    with pytest.raises(RewardFunctionError, match=pattern):
        task.rewards(_rows(), ["x"])


def test_rewards_returned_as_booleans_count_as_one_and_zero():
    """TRL's GRPOTrainer takes `[c == a for ...]`; so does evotune (numpy's bools too)."""
    import numpy as np

    task = Task("t", [], [], [lambda prompts, completions, **kw: [True, False, np.bool_(True), None]], [1.0])
    rows = [{"prompt": f"q{index}"} for index in range(4)]
    assert task.rewards(rows, ["a", "b", "c", "d"]).tolist()[:3] == [1.0, 0.0, 1.0]


# --- get_task errors -----------------------------------------------------------------------------

def test_unknown_task_and_args():
    with pytest.raises(ConfigError, match="'arithmetic'.*custom.*dataset.*reward_fns"):
        get_task("gsm9k")
    with pytest.raises(ConfigError, match="digit.*valid ones.*'digits'"):
        get_task("arithmetic", digit=3)
    assert set(TASKS) == {"arithmetic", "countdown", "conciseness", "custom", "gsm8k", "math", "ifeval", "reward_model"}


REWARD_MODULE = '''
def word_count(prompts, completions, **kwargs):
    return [float(len(c.split())) if isinstance(c, str) else float(len(c[-1]["content"].split()))
            for c in completions]

def has_target(prompts, completions, target, **kwargs):
    return [1.0 if str(t) in c else 0.0 for c, t in zip(completions, target)]
'''


@pytest.fixture
def reward_module(tmp_path, monkeypatch):
    (tmp_path / "my_test_rewards.py").write_text(REWARD_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_test_rewards"


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_custom_task_from_jsonl(tmp_path, reward_module):
    rows = [{"prompt": f"Say {i}", "target": i} for i in range(30)]
    dataset = write_jsonl(tmp_path / "data.jsonl", rows)
    task = get_task("custom", dataset=dataset, reward_fns=[f"{reward_module}:word_count",
                                                            f"{reward_module}.has_target"],
                    reward_weights=[1.0, 5.0], seed=2)
    assert len(task.eval_rows) == 3 and len(task.train_rows) == 27
    assert sorted(r["target"] for r in task.train_rows + task.eval_rows) == list(range(30))
    row = {"prompt": "Say 7", "target": 7}
    assert task.rewards([row], ["it is 7"]).tolist() == [3.0 + 5.0]
    assert get_task("custom", dataset=dataset, reward_fns=[f"{reward_module}:word_count"], seed=2).eval_rows == \
        task.eval_rows


def test_custom_eval_dataset_and_csv(tmp_path, reward_module):
    train = write_jsonl(tmp_path / "train.jsonl", [{"prompt": [{"role": "user", "content": "hi"}]}] * 4)
    (tmp_path / "eval.csv").write_text('prompt,target\n"[{""role"": ""user"", ""content"": ""yo""}]",1\nplain,2\n')
    task = get_task("custom", dataset=train, eval_dataset=str(tmp_path / "eval.csv"),
                    reward_fns=[f"{reward_module}:word_count"])
    assert len(task.train_rows) == 4
    assert task.eval_rows[0]["prompt"] == [{"role": "user", "content": "yo"}] and task.eval_rows[1]["prompt"] == "plain"


def test_builtin_task_reward_fns_are_replaced(reward_module):
    task = get_task("arithmetic", num_train=10, num_eval=2, reward_fns=[f"{reward_module}:word_count"])
    assert task.reward_fns[0].__name__ == "word_count" and task.reward_weights == [1.0]
    assert task.rewards(task.eval_rows[:1], ["one two three"]).tolist() == [3.0]
    assert "accuracy" in task.metric_fns
    with pytest.raises(ConfigError, match="reward_weights"):
        get_task("arithmetic", reward_fns=[f"{reward_module}:word_count"], reward_weights=[1.0, 2.0])


def test_custom_dataset_errors(tmp_path, reward_module):
    fn = [f"{reward_module}:word_count"]
    missing = write_jsonl(tmp_path / "noprompt.jsonl", [{"question": "q", "answer": "a"}])
    with pytest.raises(DataError, match=r"noprompt\.jsonl.*'answer', 'question'.*rename"):
        get_task("custom", dataset=missing, reward_fns=fn)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DataError, match=r"empty\.jsonl.*empty"):
        get_task("custom", dataset=str(tmp_path / "empty.jsonl"), reward_fns=fn)
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "ok"}, {"prompt": "ok"}, {"prompt": {"text": "no"}}])
    with pytest.raises(DataError, match=r"bad\.jsonl.*row 3.*`prompt`"):
        get_task("custom", dataset=bad, reward_fns=fn)
    with pytest.raises(DataError, match="not found"):
        get_task("custom", dataset=str(tmp_path / "nope.jsonl"), reward_fns=fn)
    with pytest.raises(ConfigError, match="reward_fns"):
        get_task("custom", dataset=bad)


def test_reward_fn_import_errors(tmp_path, reward_module):
    dataset = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "a"}, {"prompt": "b"}])
    with pytest.raises(ConfigError, match="no module `no_such_module_xyz` in the config's folder, the current folder"):
        get_task("custom", dataset=dataset, reward_fns=["no_such_module_xyz:fn"])
    with pytest.raises(ConfigError, match="no attribute 'missing'"):
        get_task("custom", dataset=dataset, reward_fns=[f"{reward_module}:missing"])

"""Countdown: combine 3-4 numbers with + - * / to reach a target, answer in <answer> tags.

This is the reasoning benchmark used by Qiu et al. 2025, "Evolution Strategies at Scale: LLM
Fine-Tuning Beyond Reinforcement Learning" (arXiv 2509.24372) to compare ES with GRPO/PPO; the
prompt and the 0.1 * format + answer reward follow TinyZero (Pan et al., github.com/Jiayi-Pan/TinyZero),
which those experiments reuse. Instances are generated here rather than downloaded: a seeded
generator builds a target from the numbers, and an exhaustive solver verifies each one, so every
prompt is solvable and the task needs no network.

Rewards read the completion only. The answer check parses the expression with :mod:`ast` and
evaluates only number literals and + - * / nodes, so no model output is ever executed.
"""

from __future__ import annotations

import ast
import json
import random
import re
from fractions import Fraction
from typing import Any

from ..errors import ConfigError
from .base import Task, completion_text

SYSTEM_PROMPT = ("You are a helpful assistant. You first think about the reasoning process in your mind and then "
                 "provide the user with the answer.")
USER_TEMPLATE = ("Using the numbers {numbers}, create an equation that equals {target}. You can use basic arithmetic "
                 "operations (+, -, *, /) and each number can only be used once. Show your work in <think> </think> "
                 "tags. And return the final answer in <answer> </answer> tags, for example <answer> (1 + 2) / 3 "
                 "</answer>.")

_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
# "</think>" then an answer block; the opening <think> may have been prefilled by the chat template.
_FORMAT = re.compile(r"</think>\s*<answer>.*?</answer>", re.DOTALL)
_EXPRESSION_CHARS = re.compile(r"[\d+\-*/()\s]+")
_BINARY = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
           ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b}
_SOLVE_TOLERANCE = 1e-9


def solve(numbers: list[int], target: int) -> str | None:
    """An expression using each number exactly once that equals target, or None if there is none.

    Exhaustive search over pairs (combine two values with + - * /, recurse on the shorter list),
    memoising value multisets already shown to fail; 4 numbers take about a millisecond. It runs
    in floats with a 1e-9 tolerance, far tighter than the reward's 1e-5.
    """
    items = [(float(n), str(n)) for n in numbers]
    if not items:
        return None
    if len(items) == 1:
        return items[0][1] if abs(items[0][0] - target) < _SOLVE_TOLERANCE else None
    found = _search(items, float(target), set())
    return found[1:-1] if found is not None else None  # drop the outermost parentheses


def _combinations(a: float, ea: str, b: float, eb: str) -> list[tuple[float, str]]:
    out = [(a + b, f"({ea} + {eb})"), (a * b, f"({ea} * {eb})"), (a - b, f"({ea} - {eb})"),
           (b - a, f"({eb} - {ea})")]
    if b != 0:
        out.append((a / b, f"({ea} / {eb})"))
    if a != 0:
        out.append((b / a, f"({eb} / {ea})"))
    return out


def _search(items: list[tuple[float, str]], target: float, failed: set) -> str | None:
    if len(items) == 2:
        (a, ea), (b, eb) = items
        for value, expression in _combinations(a, ea, b, eb):
            if abs(value - target) < _SOLVE_TOLERANCE:
                return expression
        return None
    key = tuple(sorted(value for value, _ in items))
    if key in failed:
        return None
    for i in range(len(items)):
        for j in range(i + 1, len(items)):
            rest = [item for k, item in enumerate(items) if k != i and k != j]
            for candidate in _combinations(*items[i], *items[j]):
                found = _search(rest + [candidate], target, failed)
                if found is not None:
                    return found
    failed.add(key)
    return None


def evaluate_expression(expression: str) -> Fraction | None:
    """Value of an expression of integers, + - * / and parentheses; None if anything else (or x/0)."""
    if not _EXPRESSION_CHARS.fullmatch(expression):
        return None
    try:
        tree = ast.parse(expression.strip(), mode="eval")
        return _evaluate_node(tree.body)
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return None


def _evaluate_node(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_evaluate_node(node.left), _evaluate_node(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate_node(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    raise ValueError(f"disallowed syntax: {type(node).__name__}")


def _int_list(numbers: Any) -> list[int]:
    if isinstance(numbers, str):  # e.g. a CSV cell "[3, 5, 7]"
        numbers = json.loads(numbers)
    return [int(n) for n in numbers]


def answer_correct(text: str, numbers: Any, target: Any) -> bool:
    """Whether the last <answer> block uses exactly ``numbers`` (each once) and evaluates to ``target``."""
    blocks = _ANSWER_BLOCK.findall(text)
    if not blocks:
        return False
    expression = blocks[-1].strip()
    value = evaluate_expression(expression)
    if value is None:
        return False
    used = sorted(int(n) for n in re.findall(r"\d+", expression))
    return used == sorted(_int_list(numbers)) and abs(float(value) - float(target)) < 1e-5


def countdown_format_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """1.0 when the completion has ``</think>`` followed by an ``<answer>...</answer>`` block."""
    return [1.0 if _FORMAT.search(completion_text(c)) else 0.0 for c in completions]


def countdown_answer_reward(completions: list[Any], numbers: list[Any], target: list[Any],
                            **kwargs: Any) -> list[float]:
    """1.0 when the last <answer> block is a correct equation (see :func:`answer_correct`)."""
    return [1.0 if answer_correct(completion_text(c), n, t) else 0.0
            for c, n, t in zip(completions, numbers, target)]


def countdown_reward(completions: list[Any], numbers: list[Any], target: list[Any], **kwargs: Any) -> list[float]:
    """TinyZero's reward: 0.1 for the think/answer format plus 1.0 for a correct answer (max 1.1)."""
    formats = countdown_format_reward(completions)
    answers = countdown_answer_reward(completions, numbers, target)
    return [0.1 * f + a for f, a in zip(formats, answers)]


def make_instance(rng: random.Random, count: int, max_number: int, max_target: int) -> tuple[list[int], int]:
    """Random numbers in 1..max_number and a target in 1..max_target reachable with all of them."""
    while True:
        numbers = [rng.randint(1, max_number) for _ in range(count)]
        values = list(numbers)
        while len(values) > 1:
            a, b = (values.pop(rng.randrange(len(values))) for _ in range(2))
            results = [a + b, a * b] + ([abs(a - b)] if a != b else [])
            results += [max(a, b) // min(a, b)] if max(a, b) % min(a, b) == 0 else []
            values.append(rng.choice(results))
        target = values[0]
        if 1 <= target <= max_target and solve(numbers, target) is not None:
            return numbers, target


def solution_text(numbers: list[int], target: int) -> str:
    """A completion in the task's format, from the task's own solver: the SFT warm start's target text
    (`evotune sft --set task=countdown` trains on it), so the model learns the <think>/<answer> format."""
    expression = solve(numbers, target)
    return f"<think>\n{expression} = {target}\n</think>\n<answer>{expression}</answer>"


def _row(numbers: list[int], target: int) -> dict:
    prompt = [{"role": "system", "content": SYSTEM_PROMPT},
              {"role": "user", "content": USER_TEMPLATE.format(numbers=numbers, target=target)}]
    return {"prompt": prompt, "numbers": numbers, "target": target, "solution": solution_text(numbers, target)}


def _generate(rng: random.Random, count: int, sizes: range, max_number: int, max_target: int,
              exclude: set) -> list[tuple[list[int], int]]:
    out, seen = [], set(exclude)
    attempts = 0
    while len(out) < count:
        attempts += 1
        if attempts > 50 * count + 1000:
            raise ConfigError(f"countdown: could not generate {count} distinct instances with max_number="
                              f"{max_number} and max_target={max_target}; raise them or lower num_train/num_eval.")
        numbers, target = make_instance(rng, rng.choice(sizes), max_number, max_target)
        key = (tuple(sorted(numbers)), target)
        if key not in seen:
            seen.add(key)
            out.append((numbers, target))
    return out


def build_countdown(*, seed: int = 0, num_eval: int | None = None, num_train: int = 2000, min_numbers: int = 3,
                    max_numbers: int = 4, max_number: int = 99, max_target: int = 999) -> Task:
    """Seeded, verified-solvable Countdown instances with ``min_numbers``..``max_numbers`` numbers."""
    num_eval = 128 if num_eval is None else num_eval
    for key, value in (("num_train", num_train), ("num_eval", num_eval)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"countdown: `{key}` must be a non-negative integer, got {value!r}.")
    if not (isinstance(min_numbers, int) and isinstance(max_numbers, int) and 2 <= min_numbers <= max_numbers <= 6):
        raise ConfigError(f"countdown: need 2 <= min_numbers <= max_numbers <= 6, got min_numbers={min_numbers!r}, "
                          f"max_numbers={max_numbers!r}.")
    if not (isinstance(max_number, int) and max_number >= 2 and isinstance(max_target, int) and max_target >= 1):
        raise ConfigError(f"countdown: `max_number` must be an integer >= 2 and `max_target` >= 1, got "
                          f"{max_number!r} and {max_target!r}.")
    sizes = range(min_numbers, max_numbers + 1)
    # Eval has its own stream (stable when num_train changes); train skips every eval instance.
    eval_items = _generate(random.Random(f"countdown-eval-{seed}"), num_eval, sizes, max_number, max_target, set())
    eval_keys = {(tuple(sorted(n)), t) for n, t in eval_items}
    train_items = _generate(random.Random(f"countdown-train-{seed}"), num_train, sizes, max_number, max_target,
                            eval_keys)
    return Task(name="countdown", train_rows=[_row(*item) for item in train_items],
                eval_rows=[_row(*item) for item in eval_items], reward_fns=[countdown_reward], reward_weights=[1.0],
                metric_fns={"accuracy": countdown_answer_reward, "format": countdown_format_reward})

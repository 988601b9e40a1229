"""Math word problems with checked final answers: ``gsm8k`` and ``math`` (MATH / PRM800K style).

Both follow ESSA (Korotyshova, Shaposhnikov et al., arXiv 2507.04453): the system prompt asks the
model to reason step by step and put its final answer in ``\\boxed{}``, and a completion is right
when its answer is mathematically equal to the gold answer. Equality is decided by HF's
math-verify (LaTeX and plain expressions, fractions, units, nested boxes), not by string match.

Gold answers are parsed once when the data is loaded: a row whose gold answer math-verify cannot
parse is dropped with a warning and counted in ``Task.skipped_rows``, so a single bad row never
stops a run and never silently scores as wrong.
"""

from __future__ import annotations

import functools
import re
import warnings
from typing import Any

from ..errors import DataError
from .base import Task, completion_text
from .data import load_rows, split_rows

SYSTEM_PROMPT = "Please reason step by step and place your final answer in \\boxed{}."
GSM8K_HUB = "openai/gsm8k:main"  # the Hub copy used when no local file is given


def _math_verify():
    try:
        import math_verify
    except ImportError as exc:  # a dependency of evotune; only a broken install gets here
        raise DataError("the gsm8k and math tasks check answers with math-verify: pip install math-verify") from exc
    return math_verify


@functools.lru_cache(maxsize=65536)
def parse_gold(answer: str) -> tuple:
    """math-verify's parse of a gold answer (wrapped in $...$ so plain LaTeX like \\frac12 is read)."""
    math_verify = _math_verify()
    text = answer if "$" in answer or "\\boxed" in answer else f"${answer}$"
    return tuple(math_verify.parse(text))


def answer_is_correct(completion: str, gold: str) -> bool:
    """Whether the completion's final answer equals `gold`: math-verify, \\boxed{} preferred."""
    math_verify = _math_verify()
    parsed_gold = parse_gold(gold)
    if not parsed_gold:
        return False
    return bool(math_verify.verify(list(parsed_gold), math_verify.parse(completion)))


def math_answer_reward(completions: list[Any], answer: list[Any], **kwargs: Any) -> list[float]:
    """1.0 when the completion's final answer is mathematically equal to `answer`, else 0.0 (TRL signature)."""
    return [1.0 if answer_is_correct(completion_text(c), str(a)) else 0.0 for c, a in zip(completions, answer)]


def boxed_format_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """1.0 when the completion puts an answer in \\boxed{...} as the system prompt asks."""
    return [1.0 if re.search(r"\\boxed\s*\{", completion_text(c)) else 0.0 for c in completions]


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} in text, braces balanced (\\boxed{\\frac{1}{2}} -> \\frac{1}{2})."""
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    opening = text.find("{", start)
    if opening < 0:
        return None
    depth = 0
    for index in range(opening, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return text[opening + 1:index]
    return None


def gsm8k_gold(answer: str) -> str | None:
    """The number after GSM8K's '####' marker, thousands commas removed ('#### 1,234' -> '1234')."""
    match = re.search(r"####\s*([^\n]+)", answer)
    if not match:
        return None
    return match.group(1).strip().replace(",", "").rstrip(".") or None


def gsm8k_solution(answer: str) -> str | None:
    """GSM8K's worked answer in the form the reward reads: calculator notes (`<<48/2=24>>`) dropped and
    the '#### 72' line turned into 'The answer is \\boxed{72}.', so `evotune sft` on gsm8k teaches the
    step-by-step, boxed format that the system prompt asks for (not a bare number)."""
    gold = gsm8k_gold(answer)
    if gold is None:
        return None
    steps = re.sub(r"<<[^>]*>>", "", answer.split("####")[0]).strip()
    return (steps + "\n" if steps else "") + f"The answer is \\boxed{{{gold}}}."


def _prompt(question: str, system_prompt: str) -> list[dict]:
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return messages + [{"role": "user", "content": question.strip()}]


def _rows(source: str, question_keys: tuple[str, ...], gold_of, system_prompt: str,
          solution_of=None) -> tuple[list[dict], int]:
    """Task rows from a file or Hub name, plus how many rows were dropped for an unusable gold answer.
    `solution_of(row)`, when given, adds a `solution` column (a worked answer to learn from in SFT)."""
    rows, dropped = [], []
    for number, row in enumerate(load_rows(source), start=1):
        if not isinstance(row, dict):
            raise DataError(f"Dataset {source!r}, row {number}: expected an object, got {type(row).__name__}.")
        question_key = next((key for key in question_keys if isinstance(row.get(key), str) and row[key].strip()), None)
        if question_key is None:
            raise DataError(f"Dataset {source!r}, row {number}: no non-empty {' or '.join(map(repr, question_keys))} "
                            f"column (columns: {sorted(row)}); rename the column holding the problem.")
        gold, column = gold_of(row)
        if gold is None or not parse_gold(gold):
            dropped.append(f"row {number} (column {column!r}: {str(row.get(column))[-60:]!r})")
            continue
        extra = {key: value for key, value in row.items() if key not in ("prompt", "answer")}
        solution = solution_of(row) if solution_of else None
        rows.append({**extra, **({"solution": solution} if solution else {}),
                     "prompt": _prompt(row[question_key], system_prompt), "answer": gold})
    if dropped:
        warnings.warn(f"Dataset {source!r}: skipped {len(dropped)} row(s) whose gold answer could not be parsed: "
                      f"{', '.join(dropped[:5])}{' ...' if len(dropped) > 5 else ''}", stacklevel=3)
    if not rows:
        raise DataError(f"Dataset {source!r} has no usable rows ({len(dropped)} skipped for unparsable answers).")
    return rows, len(dropped)


def _load(name: str, dataset: str, eval_dataset: str | None, question_keys: tuple[str, ...], gold_of,
          system_prompt: str, num_eval: int | None, num_train: int | None, seed: int, solution_of=None) -> Task:
    train, skipped = _rows(dataset, question_keys, gold_of, system_prompt, solution_of)
    evaluation = None
    if eval_dataset:
        evaluation, skipped_eval = _rows(eval_dataset, question_keys, gold_of, system_prompt, solution_of)
        skipped += skipped_eval
    train, evaluation = split_rows(train, evaluation, num_eval, seed, name, default_eval=200)
    if num_train is not None:
        train = train[:num_train]
    return Task(name=name, train_rows=train, eval_rows=evaluation, reward_fns=[math_answer_reward],
                reward_weights=[1.0], metric_fns={"accuracy": math_answer_reward, "boxed": boxed_format_reward},
                skipped_rows=skipped)


def build_gsm8k(*, seed: int = 0, num_eval: int | None = None, dataset: str | None = None,
                eval_dataset: str | None = None, num_train: int | None = None,
                system_prompt: str = SYSTEM_PROMPT) -> Task:
    """GSM8K from JSONL/CSV/parquet files or the Hub (`openai/gsm8k:main`), `question`/`answer` columns.

    The gold answer is the number after '####' in `answer`; a row without one is skipped (counted).
    Rows with a worked answer also get a `solution` column (gsm8k_solution) for `evotune sft`.
    Without `eval_dataset`, the held-out rows are the test split when `dataset` is the Hub default,
    else a seeded hold-out of `dataset`.
    """
    def gold_of(row: dict) -> tuple[str | None, str]:
        value = row.get("answer")
        if value is None:
            return None, "answer"
        text = str(value).strip()
        if "####" in text:
            return gsm8k_gold(text), "answer"
        # Without the marker only a bare number is a usable gold answer (not free text).
        return (text.replace(",", "") if re.fullmatch(r"-?[\d,]*\.?\d+(?:/\d+)?", text) else None), "answer"

    if eval_dataset is None and dataset is None:
        eval_dataset = f"{GSM8K_HUB}:test"
    def solution_of(row: dict) -> str | None:
        text = str(row.get("answer") or "")
        return gsm8k_solution(text) if "####" in text else None

    return _load("gsm8k", dataset or f"{GSM8K_HUB}:train", eval_dataset, ("question", "problem"), gold_of,
                 system_prompt, num_eval, num_train, seed, solution_of)


def build_math(*, seed: int = 0, num_eval: int | None = None, dataset: str | None = None,
               eval_dataset: str | None = None, num_train: int | None = None,
               system_prompt: str = SYSTEM_PROMPT) -> Task:
    """MATH / PRM800K / MATH500-style problems: a `problem` column and an `answer` column, or a
    `solution` whose last \\boxed{} holds the answer. Any JSONL/CSV/parquet file or Hub name."""
    if dataset is None:
        raise DataError("task `math` needs `dataset`: a JSONL/CSV/parquet file (or Hub name) with `problem` and "
                        "`answer` (or `solution` with a final \\boxed{}) columns, e.g. a MATH500 export.")

    def gold_of(row: dict) -> tuple[str | None, str]:
        if row.get("answer") not in (None, ""):
            return str(row["answer"]).strip(), "answer"
        if isinstance(row.get("solution"), str):
            return last_boxed(row["solution"]), "solution"
        return None, "answer"

    return _load("math", dataset, eval_dataset, ("problem", "question"), gold_of, system_prompt, num_eval,
                 num_train, seed)

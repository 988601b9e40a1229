"""IFEval: prompts carrying verifiable instructions ("no commas", "at least 3 bullet points", ...).

ESSA (Korotyshova, Shaposhnikov et al., arXiv 2507.04453) aligns Llama-3.1-8B on IFEval. The
instruction checkers are not re-written here: they are EleutherAI's lm-evaluation-harness
implementation of Google's IFEval (`lm_eval.tasks.ifeval`), installed with `evotune[ifeval]`.

Rows follow the IFEval format: `prompt` (text), `instruction_id_list` and `kwargs` (one dict per
instruction). The data is `dataset` (a JSONL file or `google/IFEval` from the Hub) or, by
default, a small built-in set of 24 prompts in that format covering the common instruction kinds.

Reward (for training): the fraction of a prompt's instructions followed, loose criterion
(dense, so ES sees partial progress). Metrics: IFEval's four numbers, prompt-level and
instruction-level accuracy under the strict and the loose criterion.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from ..errors import ConfigError, DataError
from ..import_utils import is_lm_eval_available
from .base import Task, completion_text
from .data import load_rows

BUILTIN = Path(__file__).parent / "builtin_data" / "ifeval_builtin.jsonl"
# nltk's English Punkt tables (`punkt_tab`), shipped so that the checkers that split sentences score offline
# (length_constraints:number_sentences; change_case:capital_word_frequency, through nltk.word_tokenize); nltk would
# download them.
NLTK_DATA = Path(__file__).parent / "builtin_data" / "nltk_data"


def add_shipped_nltk_data() -> None:
    """Put the shipped punkt_tab on nltk's search path, after the user's own directories (theirs win; the tables
    are the same). Before lm-eval's IFEval module is imported: importing it downloads punkt_tab when nltk finds
    none, which an offline machine cannot."""
    import nltk

    if str(NLTK_DATA) not in nltk.data.path:
        nltk.data.path.append(str(NLTK_DATA))


@functools.lru_cache(maxsize=1)
def _checkers():
    """lm-eval's IFEval module pair (utils, registry); imported once, on first use."""
    if not is_lm_eval_available():
        raise ConfigError("task `ifeval` checks instructions with lm-evaluation-harness: "
                          "pip install 'evotune[ifeval]' (lm-eval, langdetect, immutabledict, nltk).")
    from langdetect import DetectorFactory

    add_shipped_nltk_data()
    from lm_eval.tasks.ifeval import instructions_registry, utils

    # langdetect draws at random on every call unless seeded: an unclear text (e.g. a small model's fragment) got
    # another language, so the same completion another "response_language" score, from one evaluation to the next
    DetectorFactory.seed = 0
    return utils, instructions_registry


def _follow_list(row: dict, response: str, loose: bool) -> list[bool]:
    utils, _ = _checkers()
    example = utils.InputExample(key=row.get("key", 0), instruction_id_list=row["instruction_id_list"],
                                 prompt=row["ifeval_prompt"], kwargs=row["kwargs"])
    check = utils.test_instruction_following_loose if loose else utils.test_instruction_following_strict
    try:
        return list(check(example, response).follow_instruction_list)
    except LookupError:  # an nltk resource that is neither shipped (punkt_tab is) nor installed: not scorable here
        return []


def _scores(completions: list[Any], rows: list[dict], loose: bool, prompt_level: bool) -> list[float | None]:
    out: list[float | None] = []
    for completion, row in zip(completions, rows):
        followed = _follow_list(row, completion_text(completion), loose)
        if not followed:
            out.append(None)  # skipped, counted by Task.evaluate
        elif prompt_level:
            out.append(1.0 if all(followed) else 0.0)
        else:
            out.append(sum(followed) / len(followed))
    return out


def _rows_of(columns: dict[str, list], count: int) -> list[dict]:
    return [{key: values[index] for key, values in columns.items()} for index in range(count)]


def _metric(loose: bool, prompt_level: bool):
    def metric(prompts: list[Any], completions: list[Any], **columns: list) -> list[float | None]:
        return _scores(completions, _rows_of(columns, len(completions)), loose, prompt_level)

    metric.__name__ = f"ifeval_{'prompt' if prompt_level else 'instruction'}_{'loose' if loose else 'strict'}"
    return metric


def ifeval_reward(prompts: list[Any], completions: list[Any], **columns: list) -> list[float | None]:
    """Fraction of each prompt's instructions followed (loose), TRL's signature; rows need IFEval's columns."""
    return _scores(completions, _rows_of(columns, len(completions)), loose=True, prompt_level=False)


def _validate(rows: list[dict], source: str) -> list[dict]:
    _, registry = _checkers()
    out = []
    for number, row in enumerate(rows, start=1):
        for column in ("prompt", "instruction_id_list", "kwargs"):
            if column not in row:
                raise DataError(f"IFEval dataset {source!r}, row {number}: no `{column}` column (columns: "
                                f"{sorted(row)}); IFEval rows need prompt, instruction_id_list and kwargs.")
        ids, kwargs = row["instruction_id_list"], row["kwargs"]
        if isinstance(kwargs, str):
            kwargs = json.loads(kwargs)
        if not isinstance(ids, list) or not isinstance(kwargs, list) or len(ids) != len(kwargs):
            raise DataError(f"IFEval dataset {source!r}, row {number}: `instruction_id_list` and `kwargs` must be "
                            f"lists of equal length (got {ids!r:.80} and {kwargs!r:.80}).")
        unknown = [i for i in ids if i not in registry.INSTRUCTION_DICT]
        if unknown:
            raise DataError(f"IFEval dataset {source!r}, row {number}, column `instruction_id_list`: unknown "
                            f"instruction(s) {unknown}; known ones look like 'punctuation:no_comma'.")
        # The checkers read the prompt text; the model gets it as a chat message.
        out.append({**row, "kwargs": [{k: v for k, v in (kw or {}).items() if v is not None} for kw in kwargs],
                    "ifeval_prompt": row["prompt"], "prompt": [{"role": "user", "content": row["prompt"]}],
                    "num_instructions": len(ids)})
    return out


# Held-out responses at a budget that does not cut them (instructions ask for paragraphs, word counts, endings):
# SmolLM2-135M-Instruct on the 24 built-in prompts (bench/eval_budget/eval_budget.sh ifeval 24, float32, greedy) follows
# 52.2% of them strictly at 128 new tokens and 47.8% at 256, 512 and 1024 (loose: 52.2% at all four). Measured over
# 23: the sentence-count prompt was skipped then, before evotune shipped nltk's punkt_tab (NLTK_DATA).
EVAL_MAX_NEW_TOKENS = 256


def build_ifeval(*, seed: int = 0, num_eval: int | None = None, dataset: str | None = None,
                 eval_dataset: str | None = None) -> Task:
    """IFEval rows from `dataset` (default: the built-in 24 prompts); held-out rows from `eval_dataset`,
    else every row is used for both (IFEval is an evaluation set: train on it only knowingly)."""
    import random

    source = dataset or str(BUILTIN)
    rows = _validate(load_rows(source), source)
    if eval_dataset:
        evaluation = _validate(load_rows(eval_dataset), eval_dataset)
    else:
        evaluation = list(rows)
        random.Random(f"ifeval-{seed}").shuffle(evaluation)
    if num_eval is not None:
        evaluation = evaluation[:num_eval]
    instruction_weight = {"instruction_strict": "num_instructions", "instruction_loose": "num_instructions"}
    return Task(name="ifeval", train_rows=rows, eval_rows=evaluation, reward_fns=[ifeval_reward],
                reward_weights=[1.0],
                metric_fns={"prompt_strict": _metric(False, True), "instruction_strict": _metric(False, False),
                            "prompt_loose": _metric(True, True), "instruction_loose": _metric(True, False)},
                metric_weights=instruction_weight, eval_max_new_tokens=EVAL_MAX_NEW_TOKENS)

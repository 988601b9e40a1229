"""TRL's inputs as an evotune task takes them: reward functions given as callables, import paths or reward-model
ids (GRPOTrainer's `reward_funcs`), and datasets given as a `datasets.Dataset`, a list of dicts, a dict of columns
or a list of prompt strings (`train_dataset`, `eval_dataset`). ESTrainer converts through these."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError, DataError
from .base import function_name
from .custom import import_reward_fn
from .data import validate_rows


def _is_reward_model(spec: str) -> bool:
    """A string reward is a reward model (TRL's meaning) when it is a directory or a hub id `org/name`;
    `module:function` and `module.function` are import paths."""
    return ":" not in spec and (Path(spec).is_dir() or "/" in spec)


def resolve_reward_funcs(reward_funcs: Any) -> list[Callable]:
    """Callables, import paths and reward-model ids (one or a list) as reward functions."""
    from .reward_model import RewardModelScorer

    specs = reward_funcs if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
    functions = []
    for spec in specs:
        if callable(spec):
            functions.append(spec)
        elif isinstance(spec, str) and _is_reward_model(spec):
            functions.append(RewardModelScorer(spec))
        elif isinstance(spec, str):
            functions.append(import_reward_fn(spec))
        else:
            raise ConfigError(f"reward_funcs: {spec!r} is neither a function, an import path (`module:function`) "
                              "nor a reward model (a directory or hub id).")
    return functions


def import_path(function: Callable) -> str:
    """How config.yaml names a reward function: `module:qualname` (a reward model: its id)."""
    model = getattr(function, "model_name", None)
    if model is not None:
        return str(model)
    module, qualname = getattr(function, "__module__", None), getattr(function, "__qualname__", None)
    return f"{module}:{qualname}" if module and qualname else function_name(function)


def column_rows(columns: Mapping, name: str) -> list[dict]:
    """A dict of equal-length columns (what `dataset[:8]` returns) as rows."""
    lengths = {key: len(value) if isinstance(value, (list, tuple)) else None for key, value in columns.items()}
    if None in lengths.values() or len(set(lengths.values())) > 1:
        raise DataError(f"{name} is a dict, read as columns (as `dataset[:8]` returns), but its values are not lists "
                        f"of one length (lengths {lengths}); pass a datasets.Dataset, a list of dicts, or a dict of "
                        "equal-length lists with a `prompt` column.")
    count = next(iter(lengths.values()), 0)
    return [{key: value[index] for key, value in columns.items()} for index in range(count)]


def plain_rows(dataset: Any, name: str) -> list:
    """The rows of a dataset object: a dict of columns, a list of prompt strings, or an iterable of dicts."""
    if isinstance(dataset, (str, Path)):
        raise ConfigError(f"{name} is a path; ESTrainer takes dataset objects (datasets.Dataset or a list of dicts). "
                          "For files, set `dataset` / `eval_dataset` in ESConfig and leave the argument out.")
    if isinstance(dataset, Mapping):
        return column_rows(dataset, name)
    if not isinstance(dataset, Iterable):
        raise ConfigError(f"{name} is a {type(dataset).__name__}; pass a datasets.Dataset or a list of dicts.")
    rows = list(dataset)
    if rows and all(isinstance(row, str) for row in rows):  # a list of prompts
        return [{"prompt": row} for row in rows]
    strings = [number for number, row in enumerate(rows, start=1) if isinstance(row, str)]
    if strings:
        raise DataError(f"{name} mixes prompt strings (row {strings[0]}) with other rows; pass only strings "
                        "(prompts) or only dicts with a `prompt` column.")
    return [dict(row) if isinstance(row, Mapping) else row for row in rows]


def check_serializable(rows: list[dict], name: str) -> None:
    """The run directory keeps the datasets as JSON lines (output_dir/data/): every value must be JSON."""
    for number, row in enumerate(rows, start=1):
        for column, value in row.items():
            try:
                json.dumps(value, ensure_ascii=False)
            except (TypeError, ValueError) as error:
                raise DataError(f"{name}, row {number}, column `{column}`: a {type(value).__name__} value, which JSON "
                                "cannot hold (the run saves its datasets to output_dir/data/*.jsonl so a resume sees "
                                "them). Convert the column (e.g. bytes to str) or drop it.") from error


def dataset_rows(dataset: Any, name: str) -> list[dict]:
    """Rows of a `datasets.Dataset`, a list of dicts, a dict of columns or a list of prompt strings."""
    rows = plain_rows(dataset, name)
    if not rows:
        held_out = (" or leave it out (num_eval rows of train_dataset are then held out)" if name == "eval_dataset"
                    else "")
        raise DataError(f"{name} is empty; pass rows with a `prompt` column{held_out}.")
    validate_rows(rows, name)
    check_serializable(rows, name)
    return rows


def jsonl_text(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)

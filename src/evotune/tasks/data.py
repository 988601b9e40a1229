"""Loading prompt datasets for the ``custom`` task, with errors that say what to fix.

Local JSONL/JSON/CSV files are read with the standard library so that the package needs no pandas;
parquet and Hugging Face Hub names need the optional ``pyarrow``/``pandas`` and ``datasets`` packages,
and the error says so when they are missing.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import random
from pathlib import Path
from typing import Any

from ..errors import DataError

LOCAL_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")


def load_rows(source: str) -> list[dict]:
    """Rows of a local .jsonl/.json/.csv/.parquet file, or of a Hub dataset ``name`` or ``name:split``."""
    path = Path(source).expanduser()
    suffix = path.suffix.lower()
    if path.is_file():
        if suffix not in LOCAL_SUFFIXES:
            raise DataError(f"Dataset file {source!r} has suffix {suffix!r}; use one of {', '.join(LOCAL_SUFFIXES)}.")
        loader = {".jsonl": _read_jsonl, ".json": _read_json, ".csv": _read_csv, ".parquet": _read_parquet}[suffix]
        rows = loader(path)
    elif suffix in LOCAL_SUFFIXES or path.exists():
        raise DataError(f"Dataset file {source!r} not found (or not a file); check the `dataset` path.")
    else:
        rows = _read_hub(source)
    if not rows:
        raise DataError(f"Dataset {source!r} is empty; it needs at least one row with a `prompt` column.")
    return rows


def split_rows(rows: list[dict], eval_rows: list[dict] | None, num_eval: int | None, seed: int, name: str,
               default_eval: int = 128) -> tuple[list[dict], list[dict]]:
    """(train, eval): a given eval set (its first num_eval rows), else a seeded hold-out of num_eval rows
    (default: 10% of the rows, at least 1, at most default_eval) that training never sees."""
    if eval_rows is not None:
        return rows, (eval_rows[:num_eval] if num_eval is not None else eval_rows)
    if num_eval is None:
        num_eval = min(default_eval, max(1, len(rows) // 10))
    if not 0 < num_eval < len(rows):
        raise DataError(f"task {name}: `num_eval` {num_eval} must be between 1 and {len(rows) - 1} ({len(rows)} "
                        "rows, and training needs at least one); or give `eval_dataset`.")
    order = list(range(len(rows)))
    random.Random(f"{name}-split-{seed}").shuffle(order)
    return [rows[i] for i in order[num_eval:]], [rows[i] for i in order[:num_eval]]


def load_prompt_rows(dataset: str, eval_dataset: str | None) -> tuple[list[dict], list[dict] | None]:
    """The checked rows of `dataset` and of `eval_dataset` (None when it is not given)."""
    rows = load_rows(dataset)
    validate_rows(rows, dataset)
    eval_rows = None
    if eval_dataset:
        eval_rows = load_rows(eval_dataset)
        validate_rows(eval_rows, eval_dataset)
    return rows, eval_rows


def validate_rows(rows: list[dict], source: str) -> None:
    """Every row must be an object with a non-empty string prompt or a list of role/content messages."""
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise DataError(f"Dataset {source!r}, row {number}: expected an object with a `prompt` column, "
                            f"got {type(row).__name__}.")
        if "prompt" not in row:
            raise DataError(f"Dataset {source!r} has no `prompt` column (row {number} has columns "
                            f"{sorted(row)}); add a `prompt` column or rename the column holding the prompts to "
                            f"`prompt`.")
        if not _valid_prompt(row["prompt"]):
            raise DataError(f"Dataset {source!r}, row {number}, column `prompt`: got {row['prompt']!r:.120}; a "
                            f"prompt must be a non-empty string or a list of {{\"role\": ..., \"content\": ...}} "
                            f"messages.")


def _valid_prompt(prompt: Any) -> bool:
    if isinstance(prompt, str):
        return bool(prompt.strip())
    return (isinstance(prompt, list) and len(prompt) > 0
            and all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                    for m in prompt))


def _read_text(path: Path) -> str:
    """The file as text: UTF-8 (a leading byte-order mark is allowed), else an error naming the line."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise DataError(f"Dataset {str(path)!r}, line {line}: byte {data[exc.start]:#04x} is not UTF-8 text; save "
                        f"the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`).") from exc


class _RepeatedKey(ValueError):
    """A JSON object that names one key twice (json keeps the last value, silently)."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object_pairs_hook: the object, unless it names a key twice."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _RepeatedKey(key)
        seen[key] = value
    return seen


def _repeated(path: Path, column: str, where: str) -> DataError:
    return DataError(f"Dataset {str(path)!r}, {where}: the column {column!r} is given twice; a row would keep only one "
                     "of the two values, silently. Rename or remove one of them.")


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line, object_pairs_hook=_unique_keys))
        except _RepeatedKey as repeated:
            raise _repeated(path, repeated.key, f"line {number}") from None
        except json.JSONDecodeError as exc:
            raise DataError(f"Dataset {str(path)!r}, line {number}: not valid JSON ({exc}); each line of a "
                            f".jsonl file must be one JSON object.") from exc
    return rows


def _read_json(path: Path) -> list[dict]:
    text = _read_text(path)
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except _RepeatedKey as repeated:  # the row: the object that names it twice, found by the key's position
        row = _json_row_of(text)
        raise _repeated(path, repeated.key, f"row {row}" if row else "an object") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"Dataset {str(path)!r} is not valid JSON ({exc}).") from exc
    if isinstance(data, dict):
        lists = [value for key, value in data.items() if key in ("data", "rows") and isinstance(value, list)]
        data = lists[0] if lists else data
    if not isinstance(data, list):
        raise DataError(f"Dataset {str(path)!r}: expected a JSON list of row objects (or {{\"data\": [...]}}), "
                        f"got {type(data).__name__}.")
    return data


def _json_row_of(text: str) -> int | None:
    """The 1-based index of the first row object of the file's JSON list that names a key twice (read one object at
    a time from the raw text: a parsed list has already dropped the repeat), or None."""
    decoder = json.JSONDecoder(object_pairs_hook=_unique_keys)
    start = text.find("[")
    if start < 0:
        return None
    position, index = start + 1, 0
    while True:
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
        if position >= len(text) or text[position] == "]":
            return None
        index += 1
        try:
            _, position = decoder.raw_decode(text, position)
        except _RepeatedKey:
            return index
        except json.JSONDecodeError:
            return None


def _read_csv(path: Path) -> list[dict]:
    text = _read_text(path)
    header = next(csv.reader(io.StringIO(text, newline="")), [])
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise _repeated(path, repeated[0], "header (line 1)")
    try:
        rows = [dict(row) for row in csv.DictReader(io.StringIO(text, newline=""))]
    except csv.Error as exc:
        raise DataError(f"Dataset {str(path)!r} is not a readable CSV file ({exc}).") from exc
    for row in rows:  # a CSV cell can hold a chat prompt as JSON text
        prompt = row.get("prompt")
        if isinstance(prompt, str) and prompt.lstrip().startswith("["):
            try:
                parsed = json.loads(prompt)
            except json.JSONDecodeError:
                continue
            if _valid_prompt(parsed):
                row["prompt"] = parsed
    return rows


def _read_parquet(path: Path) -> list[dict]:
    if importlib.util.find_spec("pyarrow") is not None:
        import pyarrow
        import pyarrow.parquet as pq

        try:
            names = pq.read_schema(path).names
            repeated = sorted({name for name in names if names.count(name) > 1})
            if repeated:
                raise _repeated(path, repeated[0], "its schema")
            return pq.read_table(path).to_pylist()
        except (pyarrow.ArrowException, OSError) as exc:
            raise DataError(f"Dataset {str(path)!r} is not a readable parquet file ({exc}).") from exc
    if importlib.util.find_spec("pandas") is not None:
        import pandas as pd

        return pd.read_parquet(path).to_dict(orient="records")
    raise DataError(f"Reading parquet file {str(path)!r} needs pyarrow: `pip install pyarrow` (or convert the "
                    f"file to .jsonl).")


def _read_hub(name: str) -> list[dict]:
    if importlib.util.find_spec("datasets") is None:
        raise DataError(f"Dataset {name!r} is not a local file and the `datasets` package is not installed; "
                        f"`pip install datasets` to load it from the Hugging Face Hub, or give a local "
                        f".jsonl/.json/.csv/.parquet file.")
    import datasets

    parts = name.split(":")  # name, name:split, or name:config:split
    repo, config, split = parts[0], parts[1] if len(parts) == 3 else None, parts[-1] if len(parts) > 1 else "train"
    try:
        return list(datasets.load_dataset(repo, config, split=split))
    except Exception as exc:  # noqa: BLE001 - any Hub failure becomes a readable DataError
        raise DataError(f"Could not load Hugging Face dataset {repo!r} (config {config!r}, split {split!r}): "
                        f"{type(exc).__name__}: {exc}. Check the name (`name`, `name:split` or "
                        f"`name:config:split`), or give a local file.") from exc

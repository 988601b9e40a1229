"""evotune.tasks.data: a dataset file that is not UTF-8 is an error naming the file and the line."""

from __future__ import annotations

import re

import pytest

from evotune.errors import DataError

BAD_DATA_FILES = {
    "latin-1 jsonl": ("data.jsonl", '{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n', "line 2"),
    "latin-1 json": ("data.json", '[{"prompt": "na\xefve"}]', "line 1"),
    "latin-1 csv": ("data.csv", "prompt\nhello\n\xfcber\n", "line 3"),
}


@pytest.mark.parametrize("variant", list(BAD_DATA_FILES))
def test_non_utf8_data_file_is_named(variant, tmp_path):
    from evotune.tasks import get_task

    name, text, where = BAD_DATA_FILES[variant]
    path = tmp_path / name
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(DataError, match=re.escape(str(path)) + f".*{where}.*UTF-8"):
        get_task("custom", dataset=str(path), reward_fns=["evotune.tasks:conciseness_reward"])



@pytest.mark.parametrize("name, text, where", [
    ("repeated.csv", "prompt,answer,prompt\nfirst,1,second\n", "header (line 1)"),
    ("repeated.jsonl", '{"prompt": "ok"}\n{"prompt": "first", "answer": "1", "prompt": "second"}\n', "line 2"),
    ("repeated.json", '[{"prompt": "ok"},\n {"prompt": "first", "prompt": "second"}]', "row 2"),
    ("nested.json", '{"data": [{"prompt": "ok"}, {"prompt": "ok"}, {"answer": "1", "answer": "2"}]}', "row 3"),
])
def test_a_column_named_twice_is_refused_naming_the_column_and_the_row(tmp_path, name, text, where):
    """Python's csv and json keep one of the two values silently (the last): the file is refused instead."""
    from evotune.tasks.data import load_rows

    path = tmp_path / name
    path.write_text(text)
    column = "answer" if name == "nested.json" else "prompt"
    with pytest.raises(DataError, match=f"{name}', {re.escape(where)}: the column '{column}' is given twice"):
        load_rows(str(path))


def test_a_parquet_file_with_a_column_named_twice_is_refused(tmp_path):
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from evotune.tasks.data import load_rows

    path = tmp_path / "repeated.parquet"
    pq.write_table(pyarrow.table([pyarrow.array(["a"]), pyarrow.array(["b"])], names=["prompt", "prompt"]), path)
    with pytest.raises(DataError, match="its schema: the column 'prompt' is given twice"):
        load_rows(str(path))

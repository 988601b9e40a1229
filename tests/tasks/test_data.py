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


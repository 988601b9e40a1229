"""Security checks on the source itself: nothing in src/evotune loads a pickle or unsafe YAML (a checkpoint,
state.json or metrics file from someone else is data, never code). The CMA-ES state's refusals are in
tests/strategies/test_cma.py, the reward-function refusals in tests/tasks/test_custom.py."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "evotune"


def test_no_source_file_unpickles_or_unsafely_loads():
    """`grep -rn pickle src/` finds nothing that loads: no pickle/torch.load/unsafe YAML/np pickles."""
    pattern = re.compile(r"pickle\.loads?\(|cloudpickle\.loads?\(|dill\.loads?\(|allow_pickle\s*=\s*True"
                         r"|yaml\.(unsafe_)?load\(|torch\.load\((?!.*weights_only=True)")
    hits = [f"{path.relative_to(SRC)}:{number}: {line.strip()}" for path in SRC.rglob("*.py")
            for number, line in enumerate(path.read_text().splitlines(), start=1) if pattern.search(line)]
    assert hits == []


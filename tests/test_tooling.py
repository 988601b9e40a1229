"""The project's own lint rules ([tool.ruff] in pyproject.toml: E, F, I, UP, B) hold on every file, as the
pre-commit hook checks before a commit."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed; it comes with the dev extras: pip install -e '.[dev]'")
    done = subprocess.run([ruff, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_ruff_checks_the_rules_the_project_names():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]
    assert {"E", "F", "I", "UP", "B"} <= set(settings["lint"]["select"]) and settings["line-length"] == 120

"""Every import path the docs show works, and the module paths from before the package was grouped into
config/, runs/, evaluation/ and tracking/ still import (with a DeprecationWarning naming the new one)."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import evotune
from evotune._legacy_paths import MOVED

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "examples").rglob("*.py"))]
DOTTED = re.compile(r"(?<![\w/.])evotune(?:\.\w+)+")
FROM_IMPORT = re.compile(r"from (evotune(?:\.\w+)*) import \(?([\w, ]+)")


def documented_paths() -> set[str]:
    found = set()
    for document in DOCUMENTS:
        text = document.read_text()
        found |= set(DOTTED.findall(text))
        for module, names in FROM_IMPORT.findall(text):
            found |= {f"{module}.{name.strip().split(' as ')[0]}" for name in names.split(",") if name.strip()}
    return found


def resolves(dotted: str) -> bool:
    """A module, or an attribute of the longest importable module prefix (a class, a function, a method)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


def test_the_docs_show_import_paths():
    paths = documented_paths()
    assert {"evotune.config.TrainConfig", "evotune.trainer.Trainer", "evotune.callbacks"} <= paths


@pytest.mark.parametrize("dotted", sorted(documented_paths()))
def test_every_documented_import_path_resolves(dotted):
    assert resolves(dotted), f"{dotted} is shown in the docs but does not import"


def test_a_missing_path_is_caught():
    assert not resolves("evotune.config.NoSuchConfig")
    assert not resolves("evotune.no_such_module")


def test_old_module_paths_alias_the_moved_modules():
    """In a fresh interpreter, as in a user's script: each old path is the moved module itself, and warns."""
    script = ("import importlib, warnings\n"
              f"moved = {MOVED!r}\n"
              "for old, new in moved.items():\n"
              "    with warnings.catch_warnings(record=True) as caught:\n"
              "        warnings.simplefilter('always')\n"
              "        alias = importlib.import_module('evotune.' + old)\n"
              "    assert alias is importlib.import_module('evotune.' + new), old\n"
              "    assert any(('evotune.' + new) in str(w.message) and w.category is DeprecationWarning\n"
              "               for w in caught), old\n"
              "print(len(moved))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(len(MOVED)) != "0"


def test_old_names_of_the_grouped_packages_keep_their_functions():
    from evotune.evaluation import evaluate_models
    from evotune.evaluation.evaluate import evaluate_models as moved
    from evotune.tracking import MetricsLogger
    from evotune.tracking.tracker import MetricsLogger as moved_logger

    assert evaluate_models is moved and MetricsLogger is moved_logger
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        evotune.evaluation.nothing_here  # noqa: B018

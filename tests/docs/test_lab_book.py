"""The lab book (docs/benchmarks/) has one shape per study page: what was asked, the setup, its results as generated
claims, how to rerun; and no date, commit hash or machine path, on its pages or in what their claims render (a result
file keeps those).

A page not yet in the shape would be listed in NOT_YET_IN_SHAPE (empty now: every study page has it); a listed page
that has taken the shape fails the test until it leaves the list, so the list only shrinks.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAB_BOOK = sorted(path for path in (ROOT / "docs" / "benchmarks").glob("*.md") if path.name != "index.md")
SECTIONS = ("**What was asked.**", "**Setup.**", "**How to rerun.**")
NOT_YET_IN_SHAPE: set[str] = set()
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")  # hex with a digit and a letter
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|tmp|root|home)/")


def in_shape(text: str) -> bool:
    positions = [text.find(section) for section in SECTIONS]
    return all(position >= 0 for position in positions) and positions == sorted(positions) and "<!-- claim:" in text


@pytest.mark.parametrize("page", LAB_BOOK, ids=[page.name for page in LAB_BOOK])
def test_a_study_page_has_the_lab_books_shape(page):
    shaped = in_shape(page.read_text())
    if page.name in NOT_YET_IN_SHAPE:
        assert not shaped, f"{page.name} has the lab book's shape now: take it off NOT_YET_IN_SHAPE"
    else:
        assert shaped, f"{page.name}: give it {', '.join(SECTIONS)} in that order, and its results as claims"


@pytest.mark.parametrize("page", [*LAB_BOOK, ROOT / "docs" / "which-method.md"],
                         ids=[page.name for page in [*LAB_BOOK, ROOT / "docs" / "which-method.md"]])
def test_a_study_page_names_no_date_commit_or_machine_path(page):
    text = page.read_text()
    found = [match.group(0) for pattern in (DATE, COMMIT, MACHINE_PATH) for match in pattern.finditer(text)]
    assert not found, f"{page.name}: {found}"


def test_the_checks_catch_planted_lines():
    assert DATE.search("measured on 2026-11-26") and COMMIT.search("at commit 9b7bd3f")
    assert not COMMIT.search("a decade of effaced accede") and not COMMIT.search("sha256 over 1234567 bytes")
    assert MACHINE_PATH.search("--runs /work/study_runs") and not MACHINE_PATH.search("bench/results/work/x")
    assert in_shape("**What was asked.** x\n**Setup.** y\n<!-- claim:a -->1<!-- /claim -->\n**How to rerun.** z")
    assert not in_shape("**Setup.** y\n**What was asked.** x\n<!-- claim:a --><!-- /claim -->\n**How to rerun.**")

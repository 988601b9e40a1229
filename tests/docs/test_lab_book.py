"""The lab book (docs/benchmarks/) has one shape per study page: what was asked, the setup, its results as generated
claims, what it means, how to rerun; and no date, commit hash or machine path, on its pages or in what their claims
render (a result file keeps those).

Every page is written by one renderer (bench/labbook/render.py) from its page module (bench/labbook/pages/) and its
result files: a page that differs from what they render, a page no module renders, or a sentence of "what it means"
that is not a claim fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.claims import CLAIMS
from bench.claims.numbers import RESULT_NUMBER
from bench.labbook import render
from bench.labbook.pages import pages

ROOT = Path(__file__).resolve().parents[2]
LAB_BOOK = sorted(path for path in (ROOT / "docs" / "benchmarks").glob("*.md") if path.name != "index.md")
SECTIONS = ("**What was asked.**", "**Setup.**", "**Results.**", "**What it means.**", "**How to rerun.**")
RENDERED = render.rendered()
PAGES = pages()
CLAIM = re.compile(r"<!-- claim:[^>]*-->.*?<!-- /claim -->", re.S)
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")  # hex with a digit and a letter
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|tmp|root|home)/")


def in_shape(text: str) -> bool:
    positions = [text.find(section) for section in SECTIONS]
    return all(position >= 0 for position in positions) and positions == sorted(positions) and "<!-- claim:" in text


@pytest.mark.parametrize("page", [*LAB_BOOK, ROOT / "docs" / "benchmarks" / "index.md"],
                         ids=[page.name for page in [*LAB_BOOK, ROOT / "docs" / "benchmarks" / "index.md"]])
def test_every_lab_book_page_is_what_its_module_and_result_files_render(page):
    assert page in RENDERED, f"{page.name}: no module under bench/labbook/pages/ renders it"
    assert page.read_text() == RENDERED[page], (f"{page.name} differs from what renders it: edit its module under "
                                                 "bench/labbook/pages/, then python -m bench.labbook.render")
    if page.name != "index.md":
        assert in_shape(page.read_text()), f"{page.name}: {', '.join(SECTIONS)} in that order, results as claims"


@pytest.mark.parametrize("page", PAGES, ids=[page.slug for page in PAGES])
def test_a_pages_meaning_is_claims_and_its_own_text_states_no_result(page):
    assert page.meaning, f"{page.slug}: what it means is at least one claim"
    assert all(name in CLAIMS for name in page.meaning), [name for name in page.meaning if name not in CLAIMS]
    for field in ("asked", "results", "related", "short"):
        prose = CLAIM.sub(" ", getattr(page, field))
        prose = re.sub(r"!\[[^\]]*\]\([^)]*\)|`[^`]*`", " ", prose)  # plots and code
        found = RESULT_NUMBER.findall(prose)
        assert not found, f"{page.slug}.{field}: {found}: a result sits in a claim"


def test_the_renderer_catches_a_hand_edit_and_a_hand_kept_page(tmp_path, monkeypatch, capsys):
    page = PAGES[0]
    monkeypatch.setattr(render, "LAB_BOOK", tmp_path)
    fresh = render.rendered()
    for path, text in fresh.items():
        path.write_text(text)
    monkeypatch.setattr("sys.argv", ["render", "--check"])
    render.main()  # every page as rendered: nothing to say
    edited = tmp_path / f"{page.slug}.md"
    edited.write_text(edited.read_text().replace("**What it means.**", "**What it means.** ES wins.\n"))
    (tmp_path / "kept-by-hand.md").write_text("# A page\n")
    with pytest.raises(SystemExit):
        render.main()
    said = capsys.readouterr().out
    assert f"{page.slug}.md" in said and "kept-by-hand.md: no page module renders it" in said


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
    shaped = "**What was asked.** x\n**Setup.** y\n**Results.**\n<!-- claim:a -->1<!-- /claim -->\n**What it means.**\n"
    assert in_shape(shaped + "**How to rerun.** z")
    assert not in_shape(shaped.replace("**Setup.** y\n", "") + "**Setup.** y\n**How to rerun.**")

"""The manual states no example's setting by hand: a sentence that names an example file gives that file's settings
only as `key: value` code spans, each checked against the file, never as numbers in words, which nothing checks.

Its other rule, that a measured number stands inside a generated claim, covers every page and is bench/claims/
numbers.py's (tests/test_claims.py). The lab book (docs/benchmarks/) records what each study ran, including an
example's settings of the day: it is not the manual.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MANUAL = [DOCS / name for name in ("index.md", "getting-started.md", "es-at-scale.md", "essa.md", "eggroll.md",
                                   "tasks.md", "configs.md", "cli.md", "troubleshooting.md", "security.md",
                                   "architecture.md", "glossary.md", "coming-from-trl.md", "grpo-and-compare.md",
                                   "sweeps.md", "vllm-and-ray.md", "ray-cluster.md", "generation-speed.md",
                                   "keys-train.md", "keys-sft-grpo.md", "api.md")] \
    + sorted((DOCS / "guides").glob("*.md"))
PAGE_LINES = 150
# The site's navigation fits on one screen: its top level, with its longest section open, in at most this many lines
NAV_SCREEN_LINES = 32

CLAIM = re.compile(r"<!-- claim:[^>]*-->.*?<!-- /claim -->", re.S)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
COMMENT = re.compile(r"<!--.*?-->", re.S)
CODE = re.compile(r"`[^`]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
EXAMPLE = re.compile(r"`(examples/[\w./-]+\.yaml)`")
SETTING = re.compile(r"`([a-z_]+): ([^`:{}\[\],]+)`")  # one key and a scalar

def sentences(text: str) -> list[str]:
    """The page's prose, claims replaced by CLAIM, code blocks and comments gone, split into sentences."""
    text = CLAIM.sub(" CLAIM ", text)
    text = COMMENT.sub(" ", FENCE.sub(" ", text))
    joined = re.sub(r"\s*\n\s*", " ", text)
    return [part.strip() for part in re.split(r"(?<=[.!?:])\s+(?=[A-Z*|#\-\[`])|\s*\|\s*|\s#+\s|;\s", joined)
            if part.strip()]


def wrong_settings(text: str, root: Path = ROOT) -> list[str]:
    """Sentences naming one example file whose `key: value` code spans differ from that file's values, or that give
    a bare number beside the file's name (a setting in words, which nothing checks)."""
    found = []
    for sentence in sentences(text):
        files = set(EXAMPLE.findall(sentence))
        if len(files) != 1:
            continue  # settings beside two files (or none) are not one file's
        prose = LINK_TARGET.sub("]", CODE.sub(" ", sentence))
        if re.search(r"(?<![\w.-])\d[\d,.]*(e-?\d+)?(?![\w-])", prose.replace("CLAIM", "")):
            found.append(f"{sentence} (a number beside the file's name: write a setting as `key: value`, which is "
                         "checked, or leave it to the file)")
        path = root / files.pop()
        if not path.exists():
            found.append(f"{sentence} (no file {path.relative_to(root)})")
            continue
        values = yaml.safe_load(path.read_text()) or {}
        for key, value in SETTING.findall(sentence):
            expected = yaml.safe_load(value)
            if key in values and values[key] != expected:
                found.append(f"{sentence} ({key}: the file holds {values[key]!r}, the page says {expected!r})")
    return found


@pytest.mark.parametrize("page", MANUAL, ids=[str(page.relative_to(ROOT)) for page in MANUAL])
def test_a_manual_page_gives_an_examples_settings_as_the_file_holds_them(page):
    wrong = wrong_settings(page.read_text())
    assert not wrong, f"{page.relative_to(ROOT)}:\n" + "\n".join(wrong)


def test_the_check_reads_the_manual_and_catches_planted_settings(capsys):
    every = [sentence for page in MANUAL for sentence in sentences(page.read_text())]
    naming = [sentence for sentence in every if EXAMPLE.search(sentence)]
    checked = [sentence for sentence in naming if SETTING.search(sentence)]
    with capsys.disabled():
        print(f"\nmanual: {len(MANUAL)} pages, {len(every)} sentences, {len(naming)} naming an example file, "
              f"{len(checked)} with settings checked against it")
    assert len(every) > 500 and checked
    stale_setting = "`examples/lowrank_arithmetic.yaml` runs at `learning_rate: 4.0e-3` for a while.\n"
    assert wrong_settings(stale_setting)
    held = yaml.safe_load((ROOT / "examples" / "lowrank_arithmetic.yaml").read_text())["learning_rate"]
    assert not wrong_settings(f"`examples/lowrank_arithmetic.yaml` runs at `learning_rate: {held}`.\n")
    assert wrong_settings("`examples/no_such_file.yaml` holds `sigma: 0.1`.\n")
    assert wrong_settings("`examples/lowrank_arithmetic.yaml` runs 64 members at sigma 0.002.\n")


def test_the_readme_stays_short_and_splits_long_claims():
    """Under 150 lines, and no line over 300 characters: a claim that long becomes a table (quickstart-table)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 150, len(lines)
    long = [(number, len(line)) for number, line in enumerate(lines, 1) if len(line) > 300]
    assert not long, long


@pytest.mark.parametrize("page", MANUAL, ids=[str(page.relative_to(ROOT)) for page in MANUAL])
def test_a_manual_page_stays_short(page):
    lines = len(page.read_text().splitlines())
    assert lines <= PAGE_LINES, (f"{page.name}: {lines} lines, over {PAGE_LINES}: split it, or move a study's results "
                                 "to its lab-book page")


EVERY_SECTION = "*"


def nav_lines(nav: list, open_section: str | None = None) -> int:
    """The lines the sidebar shows: every top-level entry, and the entries of the one section that is open
    (EVERY_SECTION: all of them, at every level, as the theme's `navigation.sections` draws them)."""
    lines = 0
    for entry in nav:
        lines += 1
        title, target = next(iter(entry.items())) if isinstance(entry, dict) else (None, entry)
        if isinstance(target, list) and open_section in (title, EVERY_SECTION):
            lines += nav_lines(target, EVERY_SECTION if open_section == EVERY_SECTION else None)
    return lines


def site_navigation() -> tuple[list, list[str]]:
    from mkdocs.config import load_config

    config = load_config(str(ROOT / "mkdocs.yml"))
    return config["nav"], list(config["theme"].get("features", []))


def test_the_navigation_fits_on_one_screen():
    pytest.importorskip("mkdocs", reason="mkdocs comes with the dev extra")
    nav, features = site_navigation()
    # sections that the theme draws open would all show at once
    assert "navigation.sections" not in features and "navigation.expand" not in features, features
    sections = [title for entry in nav if isinstance(entry, dict) for title, target in entry.items()
                if isinstance(target, list)]
    worst = max([None, *sections], key=lambda section: nav_lines(nav, section))
    assert nav_lines(nav, worst) <= NAV_SCREEN_LINES, (worst, nav_lines(nav, worst))
    # and the count can fail: this navigation with every section drawn open
    assert nav_lines(nav, EVERY_SECTION) > NAV_SCREEN_LINES
    listed = {target for entry in nav for target in _targets(entry)}
    manual = {str(page.relative_to(DOCS)) for page in MANUAL}
    assert manual <= listed, f"manual pages not in the navigation: {sorted(manual - listed)}"


def _targets(entry) -> list[str]:
    if isinstance(entry, str):
        return [entry]
    if isinstance(entry, dict):
        return [target for value in entry.values() for target in _targets(value)]
    return [target for item in entry for target in _targets(item)]


# A study's conclusion in words: a comparison of what methods or settings did, outside a claim. The manual links to
# the page whose claim holds it instead. Each phrase in NOT_CONCLUSIONS says why its sentence is none.
CONCLUSION = re.compile(
    r"\b(learn(?:s|ed)? (?:more|most|less|least|faster)|(?:faster|slower|better|worse|cheaper|more accurate) than|"
    r"outperform\w*|beats?\b|wins?\b|won\b|loses?\b|lost to|ahead of|brings? no speed|no speed-?up|"
    r"(?:is|was|ran|runs) (?:\w+ )?(?:faster|slower)|the (?:best|worst|fastest|slowest)|keeps? (?:more|most|less))",
    re.I)
NOT_CONCLUSIONS = {
    "The paper reports that it beats": "a paper's claim, named as one",
    "where it is faster than float32": "the rule `dtype: auto` follows",
    "where it runs faster than float32": "the rule `dtype: auto` follows",
    "(bfloat16 is slower than float32 without it)": "the rule `dtype: auto` follows",
    "stay behind one module each": "the layout",
    "each behind an availability check": "the layout",
    "so which copy wins cannot change": "how stragglers are handled",
    "each \"ahead of\" only where the seeds separate": "how the claim after it words a ranking",
    "The model behind it": "a pointer",
    "so lowrank-es loses the batched generate": "how a Ray actor scores members (the design)",
    "leaves nothing behind": "what a failed start writes",
}


def conclusions(text: str) -> list[str]:
    """Sentences of a page's prose (claims, code and comments out) that state a comparison, less NOT_CONCLUSIONS."""
    found = []
    for sentence in sentences(text):
        prose = CODE.sub(" ", sentence)
        if CONCLUSION.search(prose) and not any(phrase in sentence for phrase in NOT_CONCLUSIONS):
            found.append(sentence)
    return found


# README.md is the manual's front page: it states no conclusion in words either (it is not held to PAGE_LINES)
CONCLUSION_PAGES = [ROOT / "README.md", *MANUAL]


@pytest.mark.parametrize("page", CONCLUSION_PAGES, ids=[str(page.relative_to(ROOT)) for page in CONCLUSION_PAGES])
def test_a_manual_page_states_no_study_conclusion_outside_a_claim(page):
    found = conclusions(page.read_text())
    assert not found, f"{page.relative_to(ROOT)}: a conclusion in words (make it a claim, or link the page):\n" + \
        "\n".join(found)


def test_the_conclusion_check_catches_planted_sentences_and_every_exception_is_used():
    planted = ["GRPO learned most in the same 60 s there, as on the CPU.",
               "So lowrank-es is the ES arm that learned most per minute here.",
               "On a CPU this brings no speed, as expected.",
               "These matmuls are slower than the packed kernel's."]
    for sentence in planted:
        assert conclusions(sentence), sentence
    assert not conclusions("Among them: <!-- claim:x -->lowrank-es learned most<!-- /claim -->.")
    text = " ".join(sentence for page in CONCLUSION_PAGES for sentence in sentences(page.read_text()))
    unused = [phrase for phrase in NOT_CONCLUSIONS if phrase not in text]
    assert not unused, f"exceptions that no page needs any more: {unused}"

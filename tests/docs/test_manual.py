"""The manual states no measured number and no example's setting by hand: a number with a unit of measure (%, x,
points, seconds, MiB, ...) stands inside a generated claim (`<!-- claim:NAME -->`, bench/claims/), or the sentence is
one of the few in NOT_MEASURED (a paper's own figure, a constant of the code); and a sentence that names an example
file with `key: value` settings in code spans says what that file holds.

The lab book (docs/benchmarks/), the changelog and the method-choice page are not the manual: they hold the studies'
numbers, generated or quoted from their result files (tests/test_claims.py checks those).
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
                                   "architecture.md")] + sorted((DOCS / "guides").glob("*.md")) \
    + sorted((DOCS / "api").glob("*.md"))

CLAIM = re.compile(r"<!-- claim:[^>]*-->.*?<!-- /claim -->", re.S)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
COMMENT = re.compile(r"<!--.*?-->", re.S)
CODE = re.compile(r"`[^`]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
# a measured quantity: a number followed by a unit a result is read in
MEASURED = re.compile(r"(?<![\w.])\d[\d,]*(\.\d+)?\s*(%|x\b|×|points?\b|s\b|ms\b|seconds?\b|minutes?\b|hours?\b|"
                      r"MiB\b|GiB\b|GB\b|tokens/s\b)")
EXAMPLE = re.compile(r"`(examples/[\w./-]+\.yaml)`")
SETTING = re.compile(r"`([a-z_]+): ([^`:{}\[\],]+)`")  # one key and a scalar

# Sentences with such a number that are not ours to generate, each with why (a fragment of the sentence: unique)
NOT_MEASURED = {
    "128-question evaluation is noisier": "a binomial interval's width at n = 128, arithmetic, not a result",
    "My accuracy went down at the end": "the same binomial width, in troubleshooting",
    "interval is about ±8 points": "the same binomial width, in troubleshooting",
    "at most every 30 s": "a constant of the code (tracking/plots.py's redraw interval)",
    "which methods fit in 24 GiB": "this machine's memory, the page's question",
    "Qwen2.5-3B 10.0% → 60.5%": "the ES at Scale paper's own figures",
    "models are 4-60x larger": "the paper's model sizes against the built-in one",
    "0.5% of the distance": "the AWD paper's setting, arithmetic on it",
    "80% of it holds": "a constant of the code (population_batch_size: auto's memory share)",
    "does so when 2 GiB stay free": "a constant of the code (master_device: auto's margin)",
    "+12.6% on GSM8K": "the ESSA paper's own figures",
    "2x faster to target accuracy": "the ESSA paper's own figures",
    "91% of pure batched-inference throughput": "the EGGROLL paper's own figure, beside the claim that measures ours",
    "with its 95% interval": "the interval's level, not a result",
    "with a 95% interval": "the interval's level, not a result",
    "60 s of training per row": "the GPU check's fixed budget, beside the claim that holds its results",
    "in the same 60 s there": "the GPU check's fixed budget, beside the claim that holds its results",
}


def sentences(text: str) -> list[str]:
    """The page's prose, claims replaced by CLAIM, code blocks and comments gone, split into sentences."""
    text = CLAIM.sub(" CLAIM ", text)
    text = COMMENT.sub(" ", FENCE.sub(" ", text))
    joined = re.sub(r"\s*\n\s*", " ", text)
    return [part.strip() for part in re.split(r"(?<=[.!?:])\s+(?=[A-Z*|#\-\[`])|\s*\|\s*|\s#+\s|;\s", joined)
            if part.strip()]


def measured_sentences(text: str) -> list[str]:
    found = []
    for sentence in sentences(text):
        prose = LINK_TARGET.sub("]", CODE.sub(" ", sentence))
        if MEASURED.search(prose) and not any(fragment in sentence for fragment in NOT_MEASURED):
            found.append(sentence)
    return found


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
def test_a_manual_page_states_no_measured_number_by_hand(page):
    stated = measured_sentences(page.read_text())
    assert not stated, f"{page.relative_to(ROOT)}: measured numbers outside a claim (generate them, link the page " \
                       "that holds them, or say in NOT_MEASURED why they are not ours):\n" + "\n".join(stated)


@pytest.mark.parametrize("page", MANUAL, ids=[str(page.relative_to(ROOT)) for page in MANUAL])
def test_a_manual_page_gives_an_examples_settings_as_the_file_holds_them(page):
    wrong = wrong_settings(page.read_text())
    assert not wrong, f"{page.relative_to(ROOT)}:\n" + "\n".join(wrong)


def test_the_manual_checks_its_sentences_and_catches_planted_ones(capsys):
    every = [sentence for page in MANUAL for sentence in sentences(page.read_text())]
    with capsys.disabled():
        print(f"\nmanual: {len(MANUAL)} pages, {len(every)} sentences checked; {len(NOT_MEASURED)} exceptions named")
    assert len(every) > 500
    stale_number = "Trained for ten minutes, lowrank-es reached 47.3% on the held-out set.\n"
    assert measured_sentences(stale_number)
    assert measured_sentences("It ran 2.7x faster than full-es.\n")
    assert not measured_sentences("It ran faster: <!-- claim:x -->2.7x<!-- /claim -->.\n")
    stale_setting = "`examples/lowrank_arithmetic.yaml` runs at `learning_rate: 4.0e-3` for 20 iterations.\n"
    assert wrong_settings(stale_setting)
    held = yaml.safe_load((ROOT / "examples" / "lowrank_arithmetic.yaml").read_text())["learning_rate"]
    assert not wrong_settings(f"`examples/lowrank_arithmetic.yaml` runs at `learning_rate: {held}`.\n")
    assert wrong_settings("`examples/no_such_file.yaml` holds `sigma: 0.1`.\n")
    assert wrong_settings("`examples/lowrank_arithmetic.yaml` runs 64 members at sigma 0.002.\n")


def test_every_named_exception_still_matches_a_sentence():
    """An exception whose sentence is gone would let a new sentence with that fragment through unread."""
    text = " ".join(" ".join(sentences(page.read_text())) for page in MANUAL)
    unused = [fragment for fragment in NOT_MEASURED if fragment not in text]
    assert not unused, unused

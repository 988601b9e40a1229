"""The rule that every result number on the pages sits in a claim: what looks like a result number, and the
contexts that say why a number on a page is not one of our results."""

from __future__ import annotations

import re
from pathlib import Path

from bench.claims._common import ROOT, SPAN

# A number with a unit of results (%, x, points, s, minutes, MiB, ...) in README.md or a top-level docs page must sit
# in a claim, or be covered by one of these contexts, which say why it is not one of our results: a setting or
# default, a budget the reader chooses, a size computed from the model, a paper's figure, a statistic of the set's
# size. Each context is matched in the number's sentence neighbourhood.
_NUMBER = r"\d[\d,]*(?:\.\d+)?"

RESULT_NUMBER = re.compile(rf"(?<![\w.\-/])[-+~]?{_NUMBER}(?:\s?[-–]\s?{_NUMBER})?(?:\s?(?:%|points?\b|x\b|×|s\b|"
                           r"seconds\b|minutes\b|MiB\b|GiB\b|MB\b|GB\b|tokens/s\b|it/s\b|ms\b))")


_HIDDEN = (SPAN, re.compile(r"```.*?```", re.S), re.compile(r"<!--.*?-->", re.S), re.compile(r"`[^`\n]*`"),
           re.compile(r"\]\([^)]*\)|https?://\S+"))

NOT_RESULTS = {
    "95% interval": "a confidence level", "pooled 95%": "a confidence level", "bootstrap 95%": "a confidence level",
    "a 95%": "a confidence level", "its 95%": "a confidence level", "about ±8 points": "the interval of n = 128",
    "80% of it holds": "population_batch_size auto's share (a default)", "3 x 10": "an example's shape",
    "SmolLM2-135M in bfloat16: 270 MB": "the model's size", "6 MB on 135M": "the model's size",
    "30 minutes": "the studies' budget", "600 s": "the studies' budget", "240 s per point": "the sweep's budget",
    "30 s by default": "a default", "says every 30 s": "a default", "10 x": "a default",
    "5 minutes by default": "a default", "60 s iteration": "the simulation's setting",
    "10% jitter": "the simulation's setting", "1% of the workers 4x": "the simulation's setting",
    "Share of 60 s": "the simulation's setting", "a 60 s iteration": "the simulation's setting",
    "past 60 s": "the simulation's setting", "a 4x slower": "the simulation's setting", "the 2% goal": "a goal",
    "1 GiB KV cache": "a setting", "92% of the node": "vLLM's default", "1.1 GB for SmolLM2-135M": "the model's size",
    "56 GB for a 7B": "a model's size", "28 GB for 7B": "a model's size", "2 GiB stay free": "a setting",
    "(16 x 48)": "a shape",
    "900 s each": "the study's budget", "~300 s of training": "the study's budget",
    "240 s of training": "the sweep's budget", "about ±4.5 points": "the interval of n",
    "at 16 x 8": "a shape", "population 24 x 32 prompts": "a shape", "medians of 3, seconds": "a repeat count",
    "population 48 x 8 prompts": "a shape", "0.5% pull per update": "the anchor's setting",
    "4% per update": "the anchor's setting", "4% of the distance back per update": "the anchor's setting",
    "paper's 0.5% per update": "the anchor's setting", "at most every 30 s": "curves.png's redraw interval",
    "the 95% Wilson interval": "an interval's level", "its paired 95% interval": "an interval's level",
    "variances at 5%": "a test's level", "trains on a 24 GiB": "the machine's size",
    "machine with 24 GiB": "the machine's size", "fit in 24 GiB": "the machine's size",
    "memory minus 2 GiB": "the memory guard's setting", "more than 5% of its own": "the scaling runner's setting",
    "135M model, 60 s of training": "the GPU check's budget",
}


# A sentence holding one of these quotes a paper: its numbers are the paper's, not ours.
PAPER_SENTENCES = ("The paper reports", "the paper reports", "paper recommends", "The paper trains")


# Results still written in words on these pages: each is to move into a claim (or go). The test fails on any
# result number not covered here or above, and on an entry here that no longer matches (so the list only shrinks).
UNCLAIMED: dict[str, list[str]] = {}


def number_pages() -> list[Path]:
    """The pages the outside-a-claim rule covers: README and every docs page but the changelog, which records
    releases as they were."""
    return [ROOT / "README.md", *sorted(path for path in (ROOT / "docs").rglob("*.md") if path.name != "changelog.md")]


def unclaimed_numbers(text: str, page: str = "") -> list[tuple[int, str, str]]:
    """(line, number, context) of each result-looking number in `text` outside claims, code and links that neither a
    NOT_RESULTS context nor the page's UNCLAIMED entries cover."""
    for pattern in _HIDDEN:
        text = pattern.sub(lambda match: re.sub(r"[^\n]", " ", match.group(0)), text)
    covers = [*NOT_RESULTS, *UNCLAIMED.get(page, [])]
    bounds = text.replace("e.g. ", "e_g_ ").replace("i.e. ", "i_e_ ")  # not ends of sentences
    found = []
    for match in RESULT_NUMBER.finditer(text):
        around = " ".join(text[max(0, match.start() - 60):match.end() + 60].split())
        number = " ".join(match.group(0).split())
        sentence_start = max(bounds.rfind(". ", 0, match.start()), bounds.rfind("\n\n", 0, match.start()))
        sentence_end = min(index for index in (bounds.find(". ", match.end()), bounds.find("\n\n", match.end()),
                                               len(text)) if index >= 0)
        if any(marker in text[sentence_start:sentence_end] for marker in PAPER_SENTENCES):
            continue
        if not any(number.lstrip("~+") in cover and cover in around for cover in covers):
            found.append((text.count("\n", 0, match.start()) + 1, number, around))
    return found

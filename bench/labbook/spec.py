"""What one lab-book page is made of: its fixed text (the question, the protocol, the rerun commands) and the names
of the claims that hold everything a rerun can change (its tables, its numbers, and what it means).

A page module under `pages/` defines `PAGE = StudyPage(...)` and `CLAIMS`, the generated sentences only that page
quotes; `render.py` writes every page in one shape. No field holds a result in words: a result is a claim.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StudyPage:
    slug: str  # docs/benchmarks/SLUG.md
    title: str
    short: str  # what it asks, in one line of the lab book's index
    folder: str  # its driver's folder under bench/ ("general scripts" where it has none)
    asked: str  # the question, fixed before any run
    setup: str  # the protocol: task, budget, seeds, n, settings (claims where a number came out of a run)
    files: tuple[str, ...]  # its result files (globs under bench/results/): their machines are listed under Setup
    results: str  # its tables and plots: claim spans, images and their captions
    meaning: tuple[str, ...]  # what it means: one claim per bullet, each a sentence its data supports
    rerun: str  # the commands that make its result files again, then `python -m bench.labbook.render`
    order: int = 100  # its place in the index
    notes: tuple[str, ...] = field(default=())  # footnotes on the protocol (no results)
    related: str = ""  # where a newer or wider study answers more (a pointer, no result)

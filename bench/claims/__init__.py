"""Measured numbers quoted in README.md and docs/, rendered from their result files.

A quoted claim sits between `<!-- claim:NAME -->` and `<!-- /claim -->`. `tests/test_claims.py` fails when the
text there differs from what NAME renders from `bench/results/`, so a number cannot outlive its data;
`docs/hooks.py` renders the docs site's copies at build time; `python -m bench.claims --update` rewrites every
quoted span from the result files (after a study re-ran).

Each study family renders its own claims (learning, stability, comparisons, essa, speed, hardware; the method
matrix's in bench/method_matrix/page.py); `numbers` holds the rule that a result number on a page sits in a claim;
CLAIMS below names every claim.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from pathlib import Path

from bench.claims import comparisons, essa, hardware, learning, reference, speed, stability
from bench.claims._common import QUOTING_FILES, RESULTS, ROOT, SPAN
from bench.claims.hardware import HARDWARE_ROWS
from bench.claims.numbers import NOT_RESULTS, PAPER_SENTENCES, UNCLAIMED, number_pages, unclaimed_numbers
from bench.labbook import pages as lab_book_pages
from bench.method_matrix import page as matrix_page
from bench.method_matrix import transfer as matrix_transfer
from bench.scaling import page as scaling_page

__all__ = ["CLAIMS", "HARDWARE_ROWS", "NOT_RESULTS", "PAPER_SENTENCES", "RESULTS", "ROOT", "SPAN", "UNCLAIMED",
           "number_pages", "quoting_files", "render", "substitute", "unclaimed_numbers"]

# The study families' claims; the lab book's pages add their own (every_claim), read when first asked for, so that
# a page module may import bench.claims' helpers while bench.claims is still loading.
STUDY_CLAIMS: dict[str, Callable[[], str]] = {
    **learning.CLAIMS, **stability.CLAIMS, **comparisons.CLAIMS, **essa.CLAIMS, **speed.CLAIMS, **hardware.CLAIMS,
    **reference.CLAIMS,  # spans rendered from the code (the keys a resume may change)
    **matrix_page.CLAIMS,  # the method matrix: "Which method?" and the README's results table
    **matrix_transfer.CLAIMS,  # its template and transfer scores side by side, MeZO against full-es
    **scaling_page.CLAIMS,  # the scaling study: docs/benchmarks/scaling.md
}


@functools.cache
def every_claim() -> dict[str, Callable[[], str]]:
    """Every claim: the study families' and each lab-book page's own sentences (bench/labbook/pages/); gathered once,
    since rendering a page asks for it at every span."""
    pages = lab_book_pages.claims()
    twice = sorted(STUDY_CLAIMS.keys() & pages.keys())
    if twice:
        raise ValueError(f"claims defined both in bench/claims/ and by a lab-book page: {twice}")
    return {**STUDY_CLAIMS, **pages}


def __getattr__(name: str):
    if name == "CLAIMS":  # `from bench.claims import CLAIMS`: every claim, the lab book's included
        return every_claim()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def render(name: str) -> str:
    claims = every_claim()
    if name not in claims:
        raise KeyError(f"no claim named {name!r} in bench/claims/ (known: {', '.join(claims)})")
    return claims[name]()


def substitute(text: str) -> str:
    """Every quoted span rendered anew from the result files."""
    return SPAN.sub(lambda m: f"<!-- claim:{m['name']} -->{render(m['name'])}<!-- /claim -->", text)


def quoting_files() -> list[Path]:
    return sorted({path for pattern in QUOTING_FILES for path in ROOT.glob(pattern)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="rewrite the quoted spans from the result files")
    args = parser.parse_args()
    for path in quoting_files():
        text = path.read_text()
        fresh = substitute(text)
        if fresh != text:
            print(f"{'updated' if args.update else 'stale'}: {path.relative_to(ROOT)}")
            if args.update:
                path.write_text(fresh)

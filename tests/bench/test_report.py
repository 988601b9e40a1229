"""bench/results/README.md is what `python -m bench.report` writes from the result files now: a result added or
changed without regenerating it fails here, and no row carries a scratch path of the machine that ran it."""

from __future__ import annotations

import re

from bench.report import RESULTS, render


def test_the_results_readme_is_the_report_of_the_files_beside_it():
    assert (RESULTS / "README.md").read_text() == render(), "run `python -m bench.report` after adding a result"


def test_the_results_readme_names_no_scratch_path_and_gives_accuracy_in_percent():
    text = (RESULTS / "README.md").read_text()
    assert not re.search(r"(?<![\w.])/(tmp|root|work|home)/", text)
    learning = text.split("## Learning")[1].split("\n## ")[0]
    assert "(eval/accuracy)" in learning and not re.search(r"\| 0\.\d{3,} \|", learning)

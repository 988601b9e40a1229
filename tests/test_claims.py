"""Every measured number quoted in README.md and docs/ equals what its result file says (bench/claims/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import claims

ROOT = Path(__file__).resolve().parents[1]


def quoted_spans() -> list[tuple[str, str, str]]:
    return [(str(path.relative_to(ROOT)), match["name"], match["text"])
            for path in claims.quoting_files() for match in claims.SPAN.finditer(path.read_text())]


def test_readme_and_docs_quote_the_main_results():
    names = {(path, name) for path, name, _ in quoted_spans()}
    # the quickstart's template and transfer scores side by side, one row per seed
    for name in ("quickstart-table", "matrix-readme-table", "hardware-status"):
        assert ("README.md", name) in names, name
    assert ("docs/getting-started.md", "quickstart-table") in names
    assert ("docs/benchmarks/scaling.md", "scaling-largest") in names


def test_every_claim_is_quoted_and_every_benchmark_page_quotes_its_results():
    """No claim renders for nobody, and each study page under docs/benchmarks/ quotes at least one."""
    spans = quoted_spans()
    assert set(claims.CLAIMS) <= {name for _, name, _ in spans}, set(claims.CLAIMS) - {name for _, name, _ in spans}
    pages = sorted((ROOT / "docs" / "benchmarks").glob("*.md"))
    assert len(pages) >= 10, "docs/benchmarks/ has lost its study pages"
    quoting = {path for path, _, _ in spans}
    for page in pages:
        if page.name != "index.md":
            assert f"docs/benchmarks/{page.name}" in quoting, f"docs/benchmarks/{page.name} quotes no claim"


@pytest.mark.parametrize("path,name,text", quoted_spans())
def test_quoted_number_equals_its_result_file(path, name, text):
    assert text == claims.render(name), (
        f"{path} quotes claim {name!r} as {text!r}, but its result file says {claims.render(name)!r}; "
        "run `python -m bench.claims --update` after re-running the study, or fix the quote")


def test_an_edited_number_is_caught(tmp_path):
    """The check itself can fail: a quote with one digit changed no longer matches."""
    true = claims.render("stability-arithmetic")
    edited = true.replace("64.3%", "66.3%")
    assert edited != true
    text = f"x <!-- claim:stability-arithmetic -->{edited}<!-- /claim --> y"
    (match,) = claims.SPAN.finditer(text)
    assert match["text"] != claims.render(match["name"])
    assert claims.substitute(text) == f"x <!-- claim:stability-arithmetic -->{true}<!-- /claim --> y"


def test_no_inline_claim_starts_a_continuation_line():
    """Markdown reads a line that starts with `<!--` as a raw HTML block, which ends the paragraph there: an inline
    claim must follow text on its line (a claim rendering a table starts with a blank line and may stand alone)."""
    for path in claims.quoting_files():
        lines = path.read_text().splitlines()
        for number, (previous, line) in enumerate(zip(lines, lines[1:]), start=2):
            match = claims.SPAN.match(line.lstrip())
            if match and previous.strip() and not match["text"].startswith("\n"):
                raise AssertionError(f"{path.relative_to(ROOT)}:{number}: the claim {match['name']!r} starts a line "
                                     "inside a paragraph; join it to the line before")


def test_the_hardware_table_is_generated_and_names_a_file_or_says_not_run():
    """Every cell of the status-by-hardware table names the result file behind it, or says it has not run; a
    file that is gone turns its cell into "not run" (nothing is claimed without a file)."""
    table = claims.render("hardware-status")
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| capability")]
    assert len(rows) == len(claims.HARDWARE_ROWS)
    for row in rows:
        for cell in row.strip("|").split(" | ")[1:]:
            assert cell.strip() == "not run" or ".json`" in cell, row
    assert "| Ray across machines | not run | not run |" in table
    original = claims.HARDWARE_ROWS[:]
    try:
        claims.HARDWARE_ROWS[:] = [("compiled decoding", ["no_such_result.json"], None)]
        assert "| compiled decoding | not run | not run |" in claims.render("hardware-status")
    finally:
        claims.HARDWARE_ROWS[:] = original


# --- no result number outside a claim (README.md and the top-level docs pages) ------------------------------------

def page_texts() -> dict[str, str]:
    return {str(path.relative_to(ROOT)): path.read_text() for path in claims.number_pages()}


def test_no_result_number_sits_outside_a_claim():
    found = [f"{page}:{line}: {number!r} in '{around}'" for page, text in page_texts().items()
             for line, number, around in claims.unclaimed_numbers(text, page)]
    assert not found, ("a result number outside a claim (make it a claim in bench/claims/, or, if it is a "
                       "setting, a paper's figure or a size, add its context to NOT_RESULTS with why):\n"
                       + "\n".join(found))


def test_an_inserted_result_number_is_caught():
    text = page_texts()["README.md"]
    assert claims.unclaimed_numbers(text, "README.md") == []
    edited = text.replace("## Documentation", "On 2 cores ES now reaches 41.3% in 12.5 minutes.\n\n## Documentation")
    assert [number for _, number, _ in claims.unclaimed_numbers(edited, "README.md")] == ["41.3%", "12.5 minutes"]
    # inside a claim, code or a link it is not prose
    quoted = text.replace("## Documentation", "`41.3%` and [12.5 minutes](x.md#41.3%)\n\n## Documentation")
    assert [number for _, number, _ in claims.unclaimed_numbers(quoted, "README.md")] == ["12.5 minutes"]


def test_the_lists_of_exceptions_only_shrink():
    """Every NOT_RESULTS context and UNCLAIMED entry still matches its pages: one that no longer does is removed,
    so a number moved into a claim cannot come back uncovered."""
    texts = page_texts()
    everything = "\n".join(" ".join(text.split()) for text in texts.values())
    stale = [context for context in claims.NOT_RESULTS if context not in everything]
    stale += [f"{page}: {entry}" for page, entries in claims.UNCLAIMED.items() for entry in entries
              if entry not in " ".join(texts[page].split())]
    assert not stale, stale


def _reloaded(module, monkeypatch, name: str, edit):
    """`module`'s claims reading result file `name` after `edit` (the result of a rerun that changed), others as is."""
    original = module.load

    def load(path: str):
        data = original(path)
        return edit(data) or data if path == name else data

    monkeypatch.setattr(module, "load", load)


def test_a_comparison_word_follows_its_numbers(monkeypatch):
    from bench.claims import essa

    assert "slower than float32's" in essa.quantization_profile()

    def faster_int4(data):
        data["time"]["int4"]["wall_s"] = data["time"]["float32"]["wall_s"] / 2

    _reloaded(essa, monkeypatch, "essa_quantization/quantization_speed.json", faster_int4)
    assert "faster than float32's" in essa.quantization_profile()


@pytest.mark.parametrize("module, claim, name, edit", [
    ("stability", "stability_formats", "stability/stability_formats_arithmetic.json",
     lambda data: data["runs"]["es-seed0"]["forms"].update({"equation": 0.0, "answer is": 1.0})),
    ("stability", "drift_anchor_detail", "drift/drift_arithmetic.json",
     lambda data: data["methods"]["es-anchor10"]["target_accuracy"].update({"mean": 1.0})),
    ("essa", "quantization_memory", "essa_quantization/quantization_speed.json",
     lambda data: data["memory"]["int4"].update({"rss_after_malloc_trim_mib": 1.0})),
])
def test_a_claim_whose_words_its_data_no_longer_supports_stops_the_render(monkeypatch, module, claim, name, edit):
    import importlib

    loaded = importlib.import_module(f"bench.claims.{module}")
    getattr(loaded, claim)()  # the committed results support the words
    _reloaded(loaded, monkeypatch, name, edit)
    with pytest.raises(ValueError, match="no longer"):
        getattr(loaded, claim)()

"""One current answer per question: for each question the pages answer, the pages that answer it quote the newest
study's claim, and no page keeps a sentence that the newer answer superseded (an older study page says so at its
top and keeps its own numbers as what its setup measured). A newer result file cannot leave an old sentence
standing: the sentence is listed here once, and every page is searched for it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from bench import claims

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Question:
    question: str
    claim: str  # the newest study's answer
    pages: tuple[str, ...]  # the pages that answer the question: each quotes the claim
    superseded: tuple[str, ...] = ()  # sentences of older answers: on no page
    superseded_claims: tuple[str, ...] = ()  # older claims no page may quote any more


QUESTIONS = (
    Question("Which method learns most for the time?", "matrix-readme-table",
             ("README.md", "docs/guides/pick-a-method.md")),
    Question("What does the study recommend?", "matrix-recommendations",
             ("docs/which-method.md", "docs/guides/pick-a-method.md"),
             superseded=("ESSA is the best ES", "recommended for Countdown")),
    Question("Does ES vary less from seed to seed than GRPO?", "matrix-spread-answer",
             ("docs/es-at-scale.md", "docs/benchmarks/stability.md"),
             superseded=("spread ten times wider", "**On both tasks here it is the other way round.**",
                         "ES spread wider than GRPO on conciseness too")),
    Question("Does lowrank-es learn faster than full-es on a CPU?", "matrix-lowrank-answer",
             ("docs/eggroll.md", "docs/benchmarks/eggroll.md"),
             superseded=("not as a default", "it did not learn faster\nthan `space: full`",
                         "did not learn faster here: with 4 prompts per member")),
    Question("How does ES learn on a GPU against GRPO?", "gpu-learning-table",
             ("docs/guides/gpu.md", "docs/benchmarks/gpu.md"), superseded_claims=("gpu-h200-grpo",),
             superseded=("held-out 26.6% -> 60.2%",)),
    Question("What fits, and how does cost grow with the model?", "scaling-largest",
             ("docs/benchmarks/scaling.md",), superseded=("the study is in progress",)),
    Question("What does the quickstart learn, in its template and past it?", "quickstart-table",
             ("README.md", "docs/getting-started.md")),
)


def pages() -> dict[str, str]:
    return {str(path.relative_to(ROOT)): path.read_text() for path in claims.quoting_files()}


def contradictions(texts: dict[str, str]) -> list[str]:
    """Every place a page still gives a superseded answer or omits the current one, in words."""
    found = []
    for question in QUESTIONS:
        for page in question.pages:
            if f"<!-- claim:{question.claim} -->" not in texts.get(page, ""):
                found.append(f"{page} answers {question.question!r} without quoting {question.claim}")
        for page, text in texts.items():
            flat = " ".join(text.split())
            for sentence in question.superseded:
                if " ".join(sentence.split()) in flat:
                    found.append(f"{page} still says {sentence!r} ({question.question!r}: now {question.claim})")
            for old in question.superseded_claims:
                if f"<!-- claim:{old} -->" in text:
                    found.append(f"{page} quotes {old}, superseded by {question.claim}")
    return found


def test_every_question_has_one_current_answer_on_every_page():
    assert contradictions(pages()) == []


@pytest.mark.parametrize("planted, expected", [
    ("On arithmetic, five full-parameter ES runs spread ten times wider than five GRPO runs.", "spread ten times"),
    ("So on a CPU, choose `lowrank` for throughput-bound settings, not as a default.", "not as a default"),
])
def test_a_planted_older_sentence_is_caught(planted, expected):
    texts = pages()
    texts["docs/benchmarks/stability.md"] += "\n" + planted + "\n"
    found = contradictions(texts)
    assert len(found) == 1 and expected in found[0], found


def test_a_page_that_drops_the_current_answer_is_caught():
    texts = pages()
    texts["docs/es-at-scale.md"] = texts["docs/es-at-scale.md"].replace("<!-- claim:matrix-spread-answer -->", "")
    assert contradictions(texts) == [
        "docs/es-at-scale.md answers 'Does ES vary less from seed to seed than GRPO?' without quoting "
        "matrix-spread-answer"]

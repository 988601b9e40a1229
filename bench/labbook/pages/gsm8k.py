"""ESSA and GRPO on GSM8K: the headline task of ESSA (Korotyshova, Shaposhnikov et al., arXiv 2507.04453) in CPU
form, from one SFT adapter on the built-in 135M model."""

from __future__ import annotations

from bench.claims._common import load, pct
from bench.labbook.pages.essa import Move, chance_verdict
from bench.labbook.spec import StudyPage


def floor_and_moves() -> str:
    """The base model's score as a count of test questions, and every later stage (SFT, ESSA's and GRPO's end)
    against the base and ESSA against GRPO, each against chance: whether anything lifted the model off its start."""
    data = load("essa_gsm8k/stages_essa_gsm8k.json")
    n = data["num_eval"]
    rows = sorted(data["rows"], key=lambda row: row["seed"])
    moves = []
    for row in rows:
        base, seed = row["base"]["value"], row["seed"]
        moves.append(Move(f"SFT on seed {seed}", base, row["sft"]["value"], n))
        for key, label in (("essa", "ESSA"), ("grpo", "GRPO")):
            moves.append(Move(f"{label}'s end on seed {seed}", base, row[key]["final"]["value"], n))
        moves.append(Move(f"GRPO against ESSA on seed {seed}", row["essa"]["final"]["value"],
                          row["grpo"]["final"]["value"], n))
    solved = sorted({round(row["base"]["value"] * n) for row in rows})
    lifted = [move for move in moves if move.beyond and move.change > 0 and "against" not in move.label]
    verdict = (f"at this size and budget neither SFT, ESSA nor GRPO lifted the model off its start of "
               f"{' / '.join(pct(row['base']['value']) for row in rows)}" if not lifted
               else "what lifted it: " + ", ".join(move.label for move in lifted))
    return (f"The base model solves {' / '.join(map(str, solved))} of {n} test questions; of the later stages "
            f"against it, and GRPO against ESSA, {chance_verdict(moves, 'difference')}: {verdict}.")


CLAIMS = {"gsm8k-meaning": floor_and_moves}

PLOT = ("![Held-out GSM8K accuracy over training time, ESSA and GRPO from the same SFT adapter, seeds 0 and 1]"
        "(plots/essa_gsm8k/compare_essa_gsm8k/accuracy_vs_time.png)")

PAGE = StudyPage(
    slug="gsm8k",
    order=130,
    title="ESSA and GRPO on GSM8K",
    short="ESSA's headline task in CPU form",
    folder="essa_gsm8k/",
    asked="From one SFT adapter, do ESSA and GRPO move the built-in 135M model on grade-school math (GSM8K), as "
          "ESSA's paper reports for 7B+ models?",
    setup="""`bench/essa_gsm8k/`: SFT on 400 worked solutions, then 900 s each of ESSA (relative offsets, sigma 0.2,
population 24 with 4 prompts per member) and GRPO (grpo-lora, 2 prompts with 4 generations each) from that adapter,
192 new tokens, test n = 200 (math-verify), seeds 0 and 1, one CPU thread; stage table by
`bench/learning/stage_table.py`.""",
    notes=("Beyond chance means outside what a 95% two-proportion test allows, on the accuracies the result files "
           "record (as on [ESSA on 2-digit addition](essa.md)).",),
    files=("essa_gsm8k/*.json", "essa_gsm8k/*/*.json"),
    results="Held-out accuracy per stage: <!-- claim:essa-gsm8k --><!-- /claim -->.\n\n" + PLOT,
    meaning=("gsm8k-meaning",),
    rerun="""`bash bench/essa_gsm8k/essa_gsm8k.sh` writes `bench/results/essa_gsm8k/compare_essa_gsm8k/` and
`stages_essa_gsm8k.json`; `python -m bench.labbook.render` renders this page from them.""",
)

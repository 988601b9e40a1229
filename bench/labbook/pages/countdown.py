"""Countdown in small form: Qiu et al.'s Table 1 setting (ES at Scale, arXiv 2509.24372) on the built-in model."""

from __future__ import annotations

from bench.claims._common import load
from bench.labbook.chance import needed_gap
from bench.labbook.spec import StudyPage

NAMES = {"essa": "ESSA", "es": "full-es", "grpo": "GRPO"}


def changes_beyond_chance() -> str:
    """Each method's move from its SFT start per seed, against what chance moves at this n (a two-proportion test
    at the 95% level): the study's answer to whether any method separated from its start."""
    data = load("countdown_small/stages_countdown_small.json")
    n = data["num_eval"]
    moves = []
    for row in sorted(data["rows"], key=lambda row: row["seed"]):
        start = row["sft"]["value"]
        for key, label in NAMES.items():
            final = row[key]["final"]["value"]
            needed = needed_gap(start, final, n)
            moves.append((abs(final - start) > needed, final - start, needed, label, row["seed"]))
    largest = max(moves, key=lambda move: abs(move[1]))
    beyond = [f"{label} on seed {seed} ({100 * change:+.1f} points)" for significant, change, _, label, seed in moves
              if significant]
    verdict = (f"{', '.join(beyond)} moved beyond what chance moves at n = {n}" if beyond else
               f"no method moved beyond what chance moves at n = {n} (the largest change, {largest[3]} on seed "
               f"{largest[4]}, {100 * largest[1]:+.1f} points, against {100 * largest[2]:.1f} needed at the 95% "
               "level)")
    return (f"After the SFT, {verdict}: in this budget the study reproduces the setting and its format problem"
            + (", not the paper's gap between ES and GRPO." if not beyond else "; see which moved above."))


CLAIMS = {"countdown-meaning": changes_beyond_chance}

PAGE = StudyPage(
    slug="countdown",
    order=140,
    title="Countdown in small form",
    short="Qiu et al.'s task with a format warm start",
    folder="countdown_small/",
    asked="Does Qiu et al.'s Table 1 setting (Countdown, ES against GRPO) reproduce in small form on the built-in "
          "135M model and a CPU?",
    setup="""`bench/countdown_small/`: held-out n = 200, one CPU thread. The base model never writes the `<answer>`
tags on its own (<!-- claim:countdown-base-format --><!-- /claim -->:
`python -m bench.learning.eval_tasks --task countdown --num-eval 64 --max-new-tokens 128 --num-samples 4 --name
eval_countdown`), so neither ES nor GRPO would have a reward signal: each method starts from an SFT on the task's
own solver's solutions (`examples/sft_countdown.yaml`, 3 numbers from 1-20, targets up to 50), then ~300 s of
training each (full-es on the merged model, ESSA and grpo-lora from the adapter), seeds 0 and 1.""",
    files=("countdown_small/*.json", "countdown_small/*/*.json", "learning/eval_countdown.json"),
    results=("<!-- claim:countdown-small --><!-- /claim -->. The format went "
             "<!-- claim:countdown-format --><!-- /claim -->.\n"
             "After SFT, <!-- claim:countdown-changes --><!-- /claim -->."
             "\n\n![Held-out Countdown accuracy over training time: full-es, ESSA and GRPO from the SFT warm start]"
             "(plots/countdown_small/compare_countdown_small/accuracy_vs_time.png)"),
    meaning=("countdown-meaning",),
    rerun="""`bash bench/countdown_small/countdown_small.sh` writes
`bench/results/countdown_small/compare_countdown_small/` and `stages_countdown_small*.json`;
`python -m bench.labbook.render` renders this page from them.""",
    related="The matched study's Countdown rows ([Which method?](../which-method.md)) train every method longer "
            "from the same SFT start.",
)

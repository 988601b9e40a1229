"""Sweep of ES settings: which of full-es's settings matter on the built-in model at a short budget per point."""

from __future__ import annotations

import json
import re

from bench.claims._common import ROOT, load, pct
from bench.claims.learning import SWEEP_GRIDS
from bench.labbook.chance import beyond_chance
from bench.labbook.spec import StudyPage

SCRIPT = ROOT / "bench" / "sweep_arithmetic" / "sweep_arithmetic.sh"
EXAMPLE_CONFIG = ROOT / "bench" / "configs" / "arithmetic_10tok.yaml"
EXAMPLE = ("shape", {"batch_size": 32})  # the grid and point that run the example's own settings


def validation_questions() -> int:
    """The validation split's size every point is scored on, as the sweep's script sets it (`num_eval=N`)."""
    return int(re.search(r"num_eval=(\d+)", SCRIPT.read_text()).group(1))




def points(example: bool = True) -> list[tuple[str, float, float]]:
    """(the point's grid and setting, its final accuracy, its start) for every point of every grid, written as the
    table writes them; without the example's own point where example is False."""
    found = []
    for grid in SWEEP_GRIDS:
        data = load(f"sweep_arithmetic/{grid}.json")
        for row in data["rows"]:
            if not example and grid == EXAMPLE[0] and all(row[key] == value for key, value in EXAMPLE[1].items()):
                continue
            setting = ", ".join(f"{key} {json.dumps(row[key]) if isinstance(row[key], (dict, list)) else row[key]}"
                                for key in data["keys"])
            found.append((f"{grid}: {setting}", row["final_mean"], row["start_mean"]))
    return found


def example_accuracy() -> float:
    grid, setting = EXAMPLE
    data = load(f"sweep_arithmetic/{grid}.json")
    return next(row["final_mean"] for row in data["rows"] if all(row[key] == value for key, value in setting.items()))


def against_example() -> str:
    """Every point against the example's point (two-proportion test at the validation split's n, 95%): which
    settings stand out from the example, and in which direction."""
    n, example = validation_questions(), example_accuracy()
    others = points(example=False)
    apart = [(name, final) for name, final, _ in others if beyond_chance(final, example, n)]
    named = "; ".join(f"`{name}` {'lower' if final < example else 'higher'} ({pct(final)})" for name, final in apart)
    if not apart:
        return (f"None of the other {len(others)} points differs from the example ({pct(example)}) beyond what "
                f"chance moves at n = {n} (two-proportion test, 95% level).")
    return (f"Against the example ({pct(example)}), {len(apart)} of the other {len(others)} points "
            f"{'differs' if len(apart) == 1 else 'differ'} beyond what chance moves at n = {n} (two-proportion test, "
            f"95% level): {named}.")


def against_start() -> str:
    """The best point against the accuracy every point started from (two-proportion test, 95%): whether any
    setting learned measurably in its seconds, the reason these runs cannot rank the settings."""
    n, found = validation_questions(), points()
    name, best, start = max(found, key=lambda point: point[1])
    risen = [point for point in found if point[1] > point[2] and beyond_chance(point[1], point[2], n)]
    seeds = max(len(load(f"sweep_arithmetic/{grid}.json")["seeds"]) for grid in SWEEP_GRIDS)
    lead = "In one seed's run per point" if seeds == 1 else f"Over up to {seeds} seeds per point"
    if risen:
        return (f"{lead}, {len(risen)} of the {len(found)} points rose above their start beyond "
                f"chance; the best, `{name}`, reached {pct(best)} from {pct(start)}.")
    return (f"{lead}, no point rose above its start beyond chance, not even the best, `{name}` ({pct(best)} from "
            f"{pct(start)}): these runs cannot say which setting learns fastest.")


def example_kept() -> str:
    """Whether any point beat the example beyond chance, and whether the example's config file still holds the
    example's settings: the page's "the example kept its settings"."""
    import yaml

    n, example = validation_questions(), example_accuracy()
    better = [name for name, final, _ in points(example=False) if final > example and beyond_chance(final, example, n)]
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    held = (f"{config['population_size']} members x {config['batch_size']} prompts, sigma {config['sigma']:g}, "
            f"learning rate {config['learning_rate']:g}")
    lead = ("no setting beat the example beyond chance" if not better
            else f"{', '.join(f'`{name}`' for name in better)} beat the example beyond chance")
    return f"So far {lead}; `bench/configs/arithmetic_10tok.yaml` holds {held}."


CLAIMS = {"sweep-meaning-example": against_example, "sweep-meaning-start": against_start,
          "sweep-meaning-kept": example_kept}

PAGE = StudyPage(
    slug="sweep",
    order=90,
    title="Sweep of ES settings",
    short="which full-ES settings learn fastest per CPU-minute",
    folder="sweep_arithmetic/",
    asked="""Which of full-es's settings matter on the built-in model: population shape, sigma and learning
rate, antithetic pairs, shaping, the reward, which weights evolve, the optimizer?""",
    setup="""`bench/sweep_arithmetic/` (each grid's `evotune sweep` table in
`bench/results/sweep_arithmetic/GRID.{json,md}`). SmolLM2-135M, 2-digit addition, 240 s of training per point on one
CPU thread, seed 0, validation n=256, scored at 10 tokens; a single point's 95% interval is about ±4.5 points
(`bash bench/sweep_arithmetic/sweep_arithmetic.sh`). The 10-token example's settings
(`bench/configs/arithmetic_10tok.yaml`: 16 members x 32 prompts, sigma 2e-3, learning rate 4e-3) are the `shape`
grid's `batch_size 32` point; the other grids change one thing at 16 x 8 (population 64 at 8 prompts; sigma and
learning rate; antithetic pairs off; `centered_rank` shaping; the digits partial-credit reward; every weight but the
tied embeddings; attention only, MLP only or the last 10 of 30 layers; Adam at learning rate 1e-3). Two points
differ beyond chance where the 95% interval of their difference (a two-proportion test on the validation split's n)
leaves out 0.""",
    files=("sweep_arithmetic/*.json",),
    notes=("Every point is scored at 10 new tokens, under the arithmetic task's own evaluation budget: [Evaluation "
           "budget](evaluation-budget.md) measures what that budget cuts. Read the points against each other, not "
           "against the newer studies' accuracies.",),
    results="<!-- claim:sweep-arithmetic --><!-- /claim -->\n\nThe sigma x learning rate grid as a heatmap (`evotune "
            "sweep` draws one for every two-key grid):\n\n![Validation accuracy over the sigma x learning rate grid, "
            "seed 0, 240 s per point](plots/sweep_arithmetic/sigma_lr.png)",
    meaning=("sweep-meaning-example", "sweep-meaning-start", "sweep-meaning-kept"),
    rerun="""`bash bench/sweep_arithmetic/sweep_arithmetic.sh` (resumable; `PART=1..4` splits the points)
writes `bench/results/sweep_arithmetic/`; `python -m bench.labbook.render` renders this page from them. See
[Sweeps](../sweeps.md) for the command a user runs.""",
    related="Each method tuned with longer runs on a validation split: the method study's tuning "
            "([Which method?](../which-method.md)).",
)

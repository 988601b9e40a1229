"""ESSA on 2-digit addition: SFT, then CMA-ES over the singular values of the SFT adapter, against GRPO from the same
adapter. Reproduces the setting of ESSA (Korotyshova, Shaposhnikov et al., arXiv 2507.04453) in small form.

Every "beyond chance" here is a two-proportion test at the 95% level on the accuracies the result files record
(pooled variance, the same n on both sides): the files hold no per-question results, so no paired test.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bench.claims._common import compare_runs, load, seeds_text
from bench.labbook.chance import needed_gap
from bench.labbook.spec import StudyPage

EXAMPLE_N = 128  # the example's held-out n (examples/sft_arithmetic.yaml); essa_arithmetic*.json do not record it
VALIDATION_N = 256  # the levers' and the grid's validation n (essa_levers.sh, essa_heatmap.sh); their files lack it
LEVERS = ("sigma", "diagonal", "openes", "reward", "prompts", "population")




def points(change: float) -> str:
    return f"{100 * change:+.1f}"


@dataclass(frozen=True)
class Move:
    """One run's accuracy at its start and at its end, on n questions."""

    label: str
    start: float
    end: float
    n: int

    @property
    def change(self) -> float:
        return self.end - self.start

    @property
    def needed(self) -> float:
        return needed_gap(self.start, self.end, self.n)

    @property
    def beyond(self) -> bool:
        return abs(self.change) > self.needed

    @property
    def closeness(self) -> float:
        return abs(self.change) / self.needed if self.needed else float(self.change != 0)


def chance_verdict(moves: Iterable[Move], what: str = "change") -> str:
    """Which moves are beyond chance, or, where none is, the one nearest to it against what it would need."""
    moves = list(moves)
    beyond = [move for move in moves if move.beyond]
    if beyond:
        return "; ".join(f"{move.label} moved {points(move.change)} points, beyond what chance moves at n = {move.n}"
                         for move in beyond)
    nearest = max(moves, key=lambda move: move.closeness)
    return (f"no {what} is beyond what chance moves (the nearest, {nearest.label}, {points(nearest.change)} points "
            f"against {100 * nearest.needed:.1f} needed at n = {nearest.n})")


def example_moves() -> list[Move]:
    """The example's SFT -> CMA-ES moves, per sigma and seed."""
    moves = []
    for name, sigma in (("essa_arithmetic", "0.02"), ("essa_arithmetic_sigma0.1", "0.1")):
        for run in sorted(load(f"essa/{name}.json")["runs"], key=lambda run: run["seed"]):
            moves.append(Move(f"sigma {sigma} on seed {run['seed']}", run["sft"], run["essa"], EXAMPLE_N))
    return moves


def _stages() -> dict:
    return load("essa/stages_essa_vs_grpo_arithmetic.json")


def budget_moves(method: str) -> list[Move]:
    """ESSA's or GRPO's move from the SFT adapter at the stage table's time budget, per seed."""
    data = _stages()
    label = {"essa": "ESSA", "grpo": "GRPO"}[method]
    return [Move(f"{label} on seed {row['seed']}", row["sft"]["value"], row[method]["at_budget"]["value"],
                 data["num_eval"]) for row in sorted(data["rows"], key=lambda row: row["seed"])]


def lever_label(name: str, row: dict) -> str:
    labels = {"sigma": f"relative sigma {row.get('sigma')}", "diagonal": "separable CMA-ES",
              "openes": f"OpenES lr {row.get('learning_rate')}", "reward": "partial credit per digit",
              "prompts": f"{row.get('batch_size')} prompts per member", "population": "ESSA's population size"}
    return labels[name]


def lever_moves() -> list[Move]:
    """Every lever's move on the validation split, from the same SFT start."""
    return [Move(lever_label(name, row), row["start_mean"], row["final_mean"], VALIDATION_N)
            for name in LEVERS for row in load(f"essa/essa_levers/{name}.json")["rows"]]


def tuned_moves() -> list[Move]:
    """The two best levers together, on the test set: start and end per seed."""
    runs = compare_runs(load("essa/compare_essa_tuned_vs_grpo_arithmetic/compare.json"), "essa_tuned")
    return [Move(f"the tuned settings on seed {run['seed']}", run["curve"][0]["value"], run["final"], run["num_eval"])
            for run in runs]


def rank_of(row: dict) -> int:
    return int(row["adapter"].split("sft-rank")[1].split("/")[0])


def heatmap_cells() -> list[tuple[int, Move]]:
    """Every cell of the rank x population x alpha grid: its population, its SFT start and its end."""
    return [(row["population_size"],
             Move(f"rank {rank_of(row)}, population {row['population_size']}, alpha {row['singular_value_fraction']}",
                  row["start_mean"], row["final_mean"], VALIDATION_N))
            for row in load("essa/essa_heatmap/sweep.json")["rows"]]


def heatmap_moves() -> list[Move]:
    return [move for _, move in heatmap_cells()]


def every_essa_move() -> list[Move]:
    return [*example_moves(), *budget_moves("essa"), *lever_moves(), *tuned_moves(), *heatmap_moves()]


def example_chance() -> str:
    """Whether the example's 15 iterations moved accuracy from the SFT beyond chance, at either sigma and seed."""
    return chance_verdict(example_moves())


def essa_vs_grpo_chance() -> str:
    """Whether ESSA or GRPO moved accuracy from the shared SFT adapter beyond chance at the time budget."""
    return chance_verdict([*budget_moves("essa"), *budget_moves("grpo")])


def levers_chance() -> str:
    """Whether any lever on the validation split moved accuracy beyond chance from its start."""
    return chance_verdict(lever_moves(), "lever")


def tuned_carry() -> str:
    """The validation gains of the levers the tuned run combines, against what that run did on the test set: the
    gain carried over only where the test moved up beyond chance."""
    levers = {move.label: move for move in lever_moves()}
    combined = [levers["separable CMA-ES"], levers["partial credit per digit"]]
    best = sorted(levers.values(), key=lambda move: move.change, reverse=True)[:2]
    named = "the two levers that gained most" if {move.label for move in best} == {m.label for m in combined} else \
        "two of the levers"
    test = tuned_moves()
    gained = [move for move in test if move.beyond and move.change > 0]
    verdict = ("the validation gain did not carry over" if not gained else
               "the validation gain carried over" if len(gained) == len(test) else
               f"the validation gain carried over on {len(gained)} of {len(test)} seeds")
    return (f"on validation, {named} ({', '.join(move.label for move in combined)}) had gained "
            f"{' / '.join(points(move.change) for move in combined)} points; together on the test set they moved "
            f"test accuracy {' / '.join(points(move.change) for move in test)} points: {verdict}")


def adapter_scale_best() -> str:
    """Whether any scale of the whole SFT adapter beats it as SFT left it (x1.00) beyond chance on any seed, and
    from which scale every seed loses beyond chance."""
    runs = [load(f"essa/adapter_scale_arithmetic_seed{seed}.json") for seed in (0, 1)]
    n = runs[0]["num_prompts"]
    moves: dict[float, list[Move]] = {}
    for run in runs:
        base = next(point for point in run["points"] if point["adapter_scale"] == 1.0)
        for point in run["points"]:
            if point is not base:
                moves.setdefault(point["adapter_scale"], []).append(
                    Move(f"x{point['adapter_scale']:.2f}", base["train_accuracy"], point["train_accuracy"], n))
    better = [move for group in moves.values() for move in group if move.beyond and move.change > 0]
    lead = (f"no scale beats the adapter as SFT left it (x1.00) beyond what chance moves at n = {n}" if not better
            else ", ".join(f"{move.label} beats x1.00 beyond chance" for move in better))
    scales = sorted(moves)
    losing = [scale for index, scale in enumerate(scales)
              if all(move.beyond and move.change < 0 for later in scales[index:] for move in moves[later])]
    return lead + (f"; from x{losing[0]:.2f} up, every seed loses beyond chance" if losing else "")


def heatmap_chance() -> str:
    """Per population, in how many cells CMA-ES ended above its SFT start; and whether any cell moved beyond chance."""
    cells = heatmap_cells()
    counts = []
    for population in sorted({population for population, _ in cells}):
        moves = [move for size, move in cells if size == population]
        counts.append(f"population {population} in {sum(m.change > 0 for m in moves)} of {len(moves)}")
    return f"CMA-ES ended above its start for {', '.join(counts)}; {chance_verdict(heatmap_moves(), 'cell')}"


def meaning_evolution() -> str:
    """Every ESSA run of the page, from its SFT adapter, against chance at its n: the page's answer to whether the
    evolution stage adds to the SFT."""
    moves = every_essa_move()
    beyond = [move for move in moves if move.beyond]
    if beyond:
        return (f"{len(beyond)} of the {len(moves)} ESSA runs moved accuracy from the SFT adapter beyond what chance "
                f"moves: {chance_verdict(beyond)}.")
    nearest = max(moves, key=lambda move: move.closeness)
    return (f"None of the {len(moves)} ESSA runs moved accuracy from its SFT adapter beyond what chance moves at its "
            f"n (the nearest, {nearest.label}, {points(nearest.change)} points against {100 * nearest.needed:.1f} "
            "needed): at these budgets the evolution stage adds nothing measurable, and ESSA's gain over SFT is not "
            "reproduced.")


def meaning_grpo() -> str:
    """GRPO from the same adapter against its start and against ESSA at the same time budget, per seed."""
    essa, grpo = budget_moves("essa"), budget_moves("grpo")
    budget = f"{_stages()['budget_time_s']:,.0f} s"
    moved = [move for move in grpo if move.beyond]
    apart = [Move(f"seed {e.label.split()[-1]}", e.end, g.end, g.n) for e, g in zip(essa, grpo)]
    against_start = (f"moved test accuracy {' / '.join(points(move.change) for move in grpo)} points at {budget}, "
                     + ("within chance" if not moved else f"beyond chance on {len(moved)} of {len(grpo)} seeds"))
    ahead = [move for move in apart if move.beyond]
    against_essa = ("and ended within chance of ESSA at the same budget on every seed" if not ahead else
                    "and ended " + "; ".join(f"{'above' if move.change > 0 else 'below'} ESSA beyond chance on "
                                             f"{move.label}" for move in ahead))
    return f"GRPO continuing the same adapter {against_start}, {against_essa}."


def meaning_sft() -> str:
    """What moved accuracy: the SFT from the base (the example's seeds) and the SFT's rank (the grid's starts),
    each against chance, and the rank's effect against the largest move of any ESSA run."""
    runs = sorted(load("essa/essa_arithmetic.json")["runs"], key=lambda run: run["seed"])
    sft = [Move(f"seed {run['seed']}", run["base"], run["sft"], EXAMPLE_N) for run in runs]
    starts = {}
    for row in load("essa/essa_heatmap/sweep.json")["rows"]:
        starts.setdefault(rank_of(row), row["start_mean"])
    low, high = min(starts), max(starts)
    rank = Move(f"rank {high} against rank {low}", starts[low], starts[high], VALIDATION_N)
    largest = max(abs(move.change) for move in every_essa_move())
    sft_verdict = ("beyond chance on every seed" if all(move.beyond for move in sft) else
                   f"beyond chance on {sum(move.beyond for move in sft)} of {len(sft)} seeds")
    rank_verdict = "beyond chance" if rank.beyond else "within chance"
    compare = "more" if abs(rank.change) > largest else "no more"
    return (f"What moved accuracy was the SFT: it took the example from {seeds_text(m.start for m in sft)} to "
            f"{seeds_text(m.end for m in sft)} ({sft_verdict} at n = {EXAMPLE_N}), and in the grid the SFT at rank "
            f"{high} scores {100 * abs(rank.change):.1f} points {'above' if rank.change > 0 else 'below'} rank "
            f"{low}'s ({rank_verdict} at n = {VALIDATION_N}), "
            f"{compare} than any ESSA run moved it ({100 * largest:.1f} points at most).")


CLAIMS = {
    "essa-example-chance": example_chance,
    "essa-vs-grpo-chance": essa_vs_grpo_chance,
    "essa-levers-chance": levers_chance,
    "essa-tuned-carry": tuned_carry,
    "adapter-scale-best": adapter_scale_best,
    "essa-heatmap-chance": heatmap_chance,
    "essa-meaning-evolution": meaning_evolution,
    "essa-meaning-grpo": meaning_grpo,
    "essa-meaning-sft": meaning_sft,
}

GRPO_PLOT = ("![Held-out accuracy over training time, ESSA and GRPO from the same SFT adapter]"
             "(plots/essa/compare_essa_vs_grpo_arithmetic/accuracy_vs_time.png)")
GRID_PLOT = ("![Validation accuracy after the grid's CMA-ES budget per rank, population and alpha]"
             "(plots/essa/essa_heatmap/heatmap.png)")
TOY_PLOT = ("![ESSA's toy on sklearn digits: CMA-ES and SGD over singular values only, SFT or random singular vectors]"
            "(plots/essa/essa_toy_digits.png)")

PAGE = StudyPage(
    slug="essa",
    order=110,
    title="ESSA on 2-digit addition",
    short="SFT, then CMA-ES over the adapter's singular values, against GRPO",
    folder="essa/",
    asked="Does ESSA's evolution stage (CMA-ES over the singular values of an SFT adapter) add to its SFT on 2-digit "
          "addition on the built-in model, and which of its settings matter?",
    setup="""`bench/essa/` (`essa_end_to_end.py`, `essa_vs_grpo.sh`, `essa_levers.sh`, `essa_heatmap.sh`,
`adapter_scale.py`; stage tables by `bench/learning/stage_table.py`), SmolLM2-135M, one CPU thread per run (the
example's runs: two). Every arm starts from a LoRA SFT on the task's solutions (`examples/sft_arithmetic.yaml`, one
epoch), which stops short on purpose to leave the evolution something to improve; these runs trained and scored at
10 new tokens.

- **The example as it was then**: sigma 0.02 and 32 prompts per member (today's `examples/essa_arithmetic.yaml`
  holds the method study's choice), seeds 0 and 1, held-out n = 128: `python -m bench.essa.essa_end_to_end
  --sft-config examples/sft_arithmetic.yaml --train-config examples/essa_arithmetic.yaml --seeds 0 1`, and again
  with `--set sigma=0.1`.
- **Relative offsets** (`svd_offsets: relative`, sigma 0.2, population 48 x 8 prompts, batched) for 600 s of
  training, and GRPO (grpo-lora) from the same adapter for the same time, seeds 0 and 1, test n = 512:
  `bash bench/essa/essa_vs_grpo.sh`.
- **Levers on the validation split**, a 300-s budget each, seed 0, n = 256, from one SFT adapter: relative sigma
  0.2, 0.5 and 1.0 with 48 members x 8 prompts (`bash bench/essa/essa_levers.sh`); then, at sigma 0.5 unless
  swept, separable CMA-ES (`cma_diagonal`), OpenES at learning rates 0.1 and 0.5, partial credit per digit as the
  fitness, 16 members x 32 prompts, and ESSA's population size (96 members, 4 prompts each)
  (`PARTS=... bash bench/essa/essa_levers.sh`).
- **The two levers together, on the test set**: `TUNED='--set cma_diagonal=true --set sigma=0.5 --set
  task_args={"reward":"digits"}' bash bench/essa/essa_vs_grpo.sh`, the same budget, n = 512.
- **Scaling the whole adapter** by a factor on the training questions (n = 256), seeds 0 and 1:
  `python -m bench.essa.adapter_scale`.
- **ESSA's rank x population x alpha grid in small form**: SFT at rank 4, 8 and 16, then CMA-ES at population 16
  or 48 and alpha 0.25 or 1 (`POPULATIONS=16,48 FRACTIONS=0.25,1.0 BUDGET=120 bash bench/essa/essa_heatmap.sh`),
  relative sigma 0.5, 8 prompts per member, validation n = 256, seed 0.
- **ESSA's Appendix E toy** on sklearn digits (`python examples/essa_toy_digits.py`): CMA-ES and full-batch SGD
  over the singular values only, with the singular vectors from SFT or random.""",
    notes=("Beyond chance means outside what a 95% two-proportion test allows, on the accuracies the result files "
           "record (pooled variance): the same questions are scored before and after, but the files hold no "
           "per-question results, so the test is not paired.",),
    files=("essa/*.json", "essa/*/*.json"),
    results="**The example.** SFT takes 2-digit addition <!-- claim:essa-sft-arithmetic --><!-- /claim -->; "
            "<!-- claim:essa-example --><!-- /claim --> (`--set sigma=0.1`): "
            "<!-- claim:essa-example-chance --><!-- /claim -->." + f"""

![Held-out accuracy from base through SFT to the end of ESSA, seeds 0 and 1](plots/essa/essa_arithmetic.png)

**Relative offsets, ESSA and GRPO from the same adapter.** <!-- claim:essa-vs-grpo-arithmetic --><!-- /claim -->;
against chance: <!-- claim:essa-vs-grpo-chance --><!-- /claim -->.

{GRPO_PLOT}

**Levers on the validation split.** <!-- claim:essa-levers-sigma --><!-- /claim -->.
The other levers: <!-- claim:essa-levers-more --><!-- /claim -->.
Against chance: <!-- claim:essa-levers-chance --><!-- /claim -->.

**The two levers together, on the test set.** <!-- claim:essa-tuned-test --><!-- /claim -->;
that is, <!-- claim:essa-tuned-carry --><!-- /claim -->.

**Scaling the whole adapter.** <!-- claim:adapter-scale --><!-- /claim -->;
that is, <!-- claim:adapter-scale-best --><!-- /claim -->.

**The rank x population x alpha grid.** <!-- claim:essa-heatmap --><!-- /claim -->;
per cell, <!-- claim:essa-heatmap-chance --><!-- /claim -->.

{GRID_PLOT}

**In sum**, from the SFT adapter, CMA-ES over the singular values on the levers and
the grid <!-- claim:essa-in-sum --><!-- /claim -->.

ESSA's Appendix E toy: CMA-ES and full-batch SGD over the singular values only, with the singular vectors from SFT
(a, b) or random (c):

{TOY_PLOT}""",
    meaning=("essa-meaning-evolution", "essa-meaning-grpo", "essa-meaning-sft"),
    rerun="""`python -m bench.essa.essa_end_to_end --sft-config examples/sft_arithmetic.yaml --train-config
examples/essa_arithmetic.yaml --seeds 0 1` (the example), `bash bench/essa/essa_vs_grpo.sh`, `bash
bench/essa/essa_levers.sh`, `bash bench/essa/essa_heatmap.sh`, `python -m bench.essa.adapter_scale`,
`python examples/essa_toy_digits.py` (each writes under `bench/results/essa/`); `python -m bench.labbook.render`
renders this page from them.""",
)

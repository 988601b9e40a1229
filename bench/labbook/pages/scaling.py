"""Scaling: peak memory and time per iteration of every method from 135M to 1.7B parameters on a 2-core CPU, and
`evotune estimate` beside the measured cells. The tables are bench/scaling/page.py's claims; the sentences below
compute what they mean from the same cells (bench/results/scaling/).
"""

from __future__ import annotations

from typing import Any

from bench.labbook.spec import StudyPage
from bench.scaling.arms import ARMS
from bench.scaling.page import CPU_SHAPES, METHOD_ARMS, ran_by_arm, records, seconds_per_unit, slope
from bench.scaling.run import DTYPE, RESULTS

BYTES_PER_PARAMETER = {"float32": 4, "bfloat16": 2}
MIB_PER_GIB = 1024
TRAINING_ARMS = [arm for arm in METHOD_ARMS if ARMS[arm]["command"] in ("train", "grpo")]  # SFT's unit is not theirs


def span(values: list[float], unit: str = "x", digits: int = 1) -> str:
    """'1.2x' or '1.2-3.4x': the range of some values as the page prints them."""
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return f"{low}{unit}" if low == high else f"{low}-{high}{unit}"


def listed(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def unit_text(record: dict[str, Any]) -> str:
    """The unit a cell ran, in words: '8 members', '4 prompts' (SFT's fixed batch has none)."""
    return ", ".join(f"{count} {name[:-1] if count == 1 else name}" for name, count in record.get("unit", {}).items())


def ran() -> dict[tuple[str, str], dict[str, Any]]:
    return {key: record for key, record in records().items() if record["status"] == "ran" and key[0] in CPU_SHAPES}


def parameter_counts() -> str:
    """Each public shape whose parameter count at SmolLM2's vocabulary differs from its own (a record keeps both),
    so the reader knows which column heads are not the published size."""
    counts = {}
    for (shape, _), record in records().items():
        if "published_parameters" in record:
            counts.setdefault(shape, (record["parameters"], record["published_parameters"]))
    parts = [f"{shape} {counts[shape][0] / 1e9:.2f}B against {counts[shape][1] / 1e9:.2f}B published"
             for shape in CPU_SHAPES if shape in counts and counts[shape][0] != counts[shape][1]]
    return ("parameters here: " + listed(parts)) if parts else "every public shape keeps its published count"


def memory_beside_inference() -> str:
    """Each ES and GRPO arm's peak over plain generation's at the same shape and the same fraction of the unit (the
    pure-inference floor), its range over the shapes where both ran so, arms sorted by their largest ratio: what
    each method holds beyond the model, read off the measured cells."""
    found = ran()
    ratios: dict[str, list[float]] = {}
    for arm in TRAINING_ARMS:
        for shape in CPU_SHAPES:
            cell, floor = found.get((shape, arm)), found.get((shape, "generation"))
            if cell and floor and cell.get("fraction_of_unit", 1.0) == floor.get("fraction_of_unit", 1.0):
                ratios.setdefault(arm, []).append(cell["peak_rss_mib"] / floor["peak_rss_mib"])
    if not ratios:
        return "No arm has a cell beside plain generation's at the same unit yet."
    order = sorted(ratios, key=lambda arm: (round(max(ratios[arm]), 1), round(min(ratios[arm]), 1)))
    return ("Peak memory over plain generation's at the same shape and fraction of the unit, by the largest ratio: "
            + ", ".join(f"{ARMS[arm]['short']} {span(ratios[arm])}" for arm in order) + ".")


def speed_beside_inference() -> str:
    """Each ES arm's new tokens per second over plain generation's at the same shape (tokens per second compare
    across units), its range over shapes, sorted fastest first, and which arm was fastest at each shape."""
    found = ran()
    ratios: dict[str, list[float]] = {}
    fastest = {}
    for shape in CPU_SHAPES:
        floor = found.get((shape, "generation"))
        cells = {arm: found[(shape, arm)] for arm in TRAINING_ARMS
                 if ARMS[arm]["command"] == "train" and (shape, arm) in found}
        if not floor or not cells:
            continue
        for arm, cell in cells.items():
            ratios.setdefault(arm, []).append(cell["new_tokens_per_second"] / floor["new_tokens_per_second"])
        fastest[shape] = max(cells, key=lambda arm: cells[arm]["new_tokens_per_second"])
    if not ratios:
        return "No ES arm has a cell beside plain generation's yet."
    order = sorted(ratios, key=lambda arm: -min(ratios[arm]))
    winners = sorted(set(fastest.values()))
    said = (f"{ARMS[winners[0]]['short']} was the fastest ES arm at every shape" if len(winners) == 1 else
            "the fastest ES arm was " + listed([f"{ARMS[arm]['short']} at {shape}" for shape, arm in fastest.items()]))
    return ("New tokens per second over plain generation's at the same shape: "
            + ", ".join(f"{ARMS[arm]['short']} {span(ratios[arm])}" for arm in order) + f"; {said}.")


def weights_gib(record: dict[str, Any]) -> float:
    return record["parameters"] * BYTES_PER_PARAMETER[DTYPE] / 2**30


def repeat_spread() -> float:
    """The largest relative difference between two peaks of one cell measured on two machine types (the study's
    repeats under float32_cross/): how far a peak moves with no change in the work, the floor of a real fall."""
    main = records()
    spreads = [abs(record["peak_rss_mib"] / main[key]["peak_rss_mib"] - 1)
               for folder in sorted((RESULTS / f"{DTYPE}_cross").glob("*/")) for key, record in records(folder).items()
               if record["status"] == "ran" and main.get(key, {}).get("status") == "ran"]
    return max(spreads, default=0.0)


def falls(by_arm: dict[str, list[dict[str, Any]]], floor: float) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(arm, smaller cell, larger cell) wherever an arm's peak fell by more than `floor` (relative) from one shape to
    the next larger it ran."""
    found = []
    for arm, cells in by_arm.items():
        for smaller, larger in zip(cells, cells[1:]):
            if larger["peak_rss_mib"] < smaller["peak_rss_mib"] * (1 - floor):
                found.append((arm, smaller, larger))
    return found


def memory_of_smaller_units() -> str:
    """Where an arm's peak fell from one shape to a larger one by more than a repeated cell's peak moves, the cells'
    units and how much the weights grew between them: a fall despite the weights' growth, at a smaller unit, shows
    that what the unit holds at once outweighs the weights' growth in that arm's peak, so its memory slope
    understates its growth at equal work."""
    by_arm, floor = ran_by_arm(), repeat_spread()
    found = falls(by_arm, floor)
    if not found:
        return (f"No arm's peak fell by more than {floor:.0%} (the most a repeated cell's moved) from one shape to a "
                "larger one.")
    parts, all_smaller = [], True
    for arm, smaller, larger in found:
        all_smaller &= larger.get("fraction_of_unit", 1.0) < smaller.get("fraction_of_unit", 1.0)
        parts.append(f"the peak of {ARMS[arm]['short']} fell from {smaller['peak_rss_mib'] / MIB_PER_GIB:.1f} GiB at "
                     f"{smaller['shape']} ({unit_text(smaller)}) to {larger['peak_rss_mib'] / MIB_PER_GIB:.1f} GiB at "
                     f"{larger['shape']} ({unit_text(larger)}) though its weights grew by "
                     f"{weights_gib(larger) - weights_gib(smaller):.1f} GiB")
    slopes = ", ".join(f"{slope(by_arm[arm], lambda record: record['peak_rss_mib']):.2f}"
                       for arm in dict.fromkeys(arm for arm, _, _ in found))
    verdict = (f"what a unit holds outweighs the weights' growth there, so these memory slopes ({slopes}) understate "
               "growth at equal work" if all_smaller else "not every such fall came with a smaller unit")
    text = "; ".join(parts) + f", falls beyond a repeated cell's {floor:.0%}: {verdict}."
    return text[0].upper() + text[1:]


def peer_against_lowrank() -> str:
    """The peer's memory against its number of members (where the guard stopped a larger unit beside the one that
    ran: at least the difference per added member, against the weights' size), then whether lowrank-es ran as many or
    more members in less memory, and how much faster per candidate-token, at the shapes both ran."""
    found = ran()
    per_member, weights, shapes = [], [], []
    for shape in CPU_SHAPES:
        cell = found.get((shape, "peer_torcheggroll"))
        for attempt in (cell or {}).get("did_not_fit_at", []):
            added = attempt["unit"]["members"] - cell["unit"]["members"]
            per_member.append(f"{(attempt['stopped_at_mib'] - cell['peak_rss_mib']) / MIB_PER_GIB / added:.1f}")
            weights.append(f"{weights_gib(cell):.1f}")
            shapes.append(shape)
    both = [(found[(shape, "peer_torcheggroll")], found[(shape, "lowrank")]) for shape in CPU_SHAPES
            if (shape, "peer_torcheggroll") in found and (shape, "lowrank") in found]
    if not both:
        return "No shape has both the peer's and lowrank-es's cells yet."
    lighter = sum(ours["unit"]["members"] >= theirs["unit"]["members"] and ours["peak_rss_mib"] < theirs["peak_rss_mib"]
                  for theirs, ours in both)
    speed = [seconds_per_unit(theirs) / seconds_per_unit(ours) for theirs, ours in both]
    lead = (f"The peer's memory grows with its members, by at least {' and '.join(per_member)} GiB per added member at "
            f"{listed(shapes)} (its {DTYPE} weights: {' and '.join(weights)} GiB), where the guard stopped a larger "
            "unit; " if per_member else "")
    where = "all" if lighter == len(both) else f"{lighter} of the"
    faster = (f"{span(speed)} faster per candidate-token" if min(speed) > 1 else
              f"at {span(speed)} the peer's speed per candidate-token")
    text = (f"at {where} {len(both)} shapes both ran, lowrank-es ran as many members or more in less memory, and "
            f"{faster}.")
    return lead + text if lead else text[0].upper() + text[1:]


def estimate_within_bounds() -> str:
    """`evotune estimate`'s worst errors in sample (the committed coefficients on the cells they were fitted on) and
    with each shape left out of the fit, each against the study's bounds (bench/scaling/fit.py): which hold."""
    from bench.scaling.fit import MEMORY_BOUND, TIME_BOUND, errors, rows, worst
    from evotune.estimate.model import load_coefficients

    coefficients, found = load_coefficients(), rows()
    table = errors(found, coefficients)
    memory, seconds = worst(table)
    over = {name: sum(abs(row[f"{name}_error"]) > bound for row in table)
            for name, bound in (("memory", MEMORY_BOUND), ("time", TIME_BOUND))}
    verdicts = [f"{name} within its bound" if not over[name] else
                f"{name} past its bound on {over[name]} cell{'s' if over[name] > 1 else ''}" for name in over]
    text = (f"In sample, `evotune estimate`'s worst errors over the {len(table)} cells are {memory:.0%} of peak memory "
            f"and {seconds:.0%} of time, against the study's bounds of {MEMORY_BOUND:.0%} and {TIME_BOUND:.0%}: "
            f"{' and '.join(verdicts)}.")
    sessions = [row["record"]["sessions"] for row in found if "sessions" in row["record"]]
    if sessions:  # the same cell timed in two sessions: how far a time moves with no change in the work
        moves = [session["seconds_per_iteration"] / cell[0]["seconds_per_iteration"] - 1
                 for cell in sessions for session in cell[1:]]
        text += (f" {len(sessions)} cells timed again in another session on the same machine type moved by "
                 f"{min(moves):+.0%} to {max(moves):+.0%} with no change in the work; the fit reads such a cell at "
                 "the mean of its sessions.")
    held_out = (coefficients.get("held_out_error") or {}).get("by_shape", {})
    if held_out:
        within = {name: [shape for shape, error in held_out.items() if error[name] <= bound]
                  for name, bound in (("memory", MEMORY_BOUND), ("time", TIME_BOUND))}
        said = {name: listed(shapes) if shapes else "none" for name, shapes in within.items()}
        worst_of = {name: max(error[name] for error in held_out.values()) for name in within}
        text += (f" Of the {len(held_out)} shapes, each predicted by a fit on the other shapes alone, memory stays "
                 f"within its bound for {said['memory']}, time for {said['time']} (worst: memory "
                 f"{worst_of['memory']:.0%}, time {worst_of['time']:.0%}).")
    return text


CLAIMS = {"scaling-parameters": parameter_counts, "scaling-memory-beside-inference": memory_beside_inference,
          "scaling-speed-beside-inference": speed_beside_inference, "scaling-smaller-units": memory_of_smaller_units,
          "scaling-peer-meaning": peer_against_lowrank, "scaling-estimate-meaning": estimate_within_bounds}

PAGE = StudyPage(
    slug="scaling",
    order=180,
    title="Scaling: what fits and how cost grows",
    short="peak memory and time of every method from 135M to 1.7B parameters, the largest each trains, "
          "`evotune estimate` against the cells",
    folder="scaling/",
    asked="How do peak memory and time per iteration grow with the model, for every method, on one 2-core CPU, "
          "and how close does `evotune estimate` come to those measurements, in sample and out "
          "of it?",
    setup="""`bench/scaling/` on a 2-core CPU machine with 24 GiB, float32, one cell (an arm on a shape) at a time, each
in its own process: <!-- claim:scaling-progress --><!-- /claim -->

- **Shapes**: SmolLM2-135M (the built-in), SmolLM2-360M, Qwen2.5-0.5B, Qwen2.5-1.5B and SmolLM2-1.7B, rebuilt from
  their published configs with random weights from a fixed seed (a forward pass costs the same per token whatever
  the weights learned), each with SmolLM2's tokenizer and so a vocabulary resized to 49,152 tokens
  (<!-- claim:scaling-parameters --><!-- /claim -->). For the estimate's fit alone, shapes of no public model pull
  apart layers and width, which the public ones keep in one proportion (24 to 32 layers): `deep-narrow-40L` (40
  layers of width 256) and `shallow-wide-4L` (4 layers of width 1,536), and the narrow width at two more depths,
  `narrow-12L` and `narrow-24L`, so a cost per layer and one per decode step come apart.
- **Equal work per cell**: the method study's unit, every completion forced to all 48 tokens (`min_new_tokens`): ES
  16 members x 8 prompts, GRPO 8 prompts x 8 completions, SFT 8 sequences. Above 250M parameters a cell runs half of
  it, a quarter above 1B, less where the whole is predicted not to fit (`[0.5 unit]` in the table).
- **Per cell**: peak RSS of its process tree, seconds per iteration (the median of the steps after the first), new
  tokens per second, ES's fraction of pure inference (plain generation of the same tokens).
- **Memory guard**: a watchdog stops a cell holding more than the machine's free memory minus 2 GiB ("did not fit",
  never a swap); a cell whose predicted peak is over the limit is recorded "predicted not to fit" (its file names
  the predictor); one stopped though predicted to fit runs again at a smaller unit, and the table names the attempt.
- **Timing alone**: each cell records the CPU seconds other work took meanwhile; one beside more than 5% of its own
  is run again. A cell timed again in a later session on the same machine type (`float32_repeat/`) is read at the
  mean of its sessions.
- **The peer**: the loop a user would write instead with `torcheggroll` 0.2.0 (its `prepare_population` /
  `apply_fitness_scores` API around transformers' `generate`, `bench/scaling/inference.py`), which materializes every
  member's weights.
- **`evotune estimate`** counts a run's memory terms from its config and its model's shape and scales each by a
  coefficient fitted on these cells (least squares on relative error). Its time is a per-matmul roofline: each
  projection of each decode or prefill pass at the larger of its bytes' time and its FLOPs' (a layer at least a
  floor), plus per-layer, KV-cache, training and token-distribution terms, at rates fitted per machine type on that
  type's cells (`bench/scaling/roofline.py`); a machine of another type runs at the reference type's rates, scaled by
  its speed probe.""",
    notes=("Seconds are per token, so they compare across cells that ran different fractions of the unit; a peak is "
           "its own unit's.",
           "The study's GPU part (bfloat16, every shape up to Llama-3-8B) runs with `bash bench/gpu_check/gpu_check.sh "
           "scaling` on a lent GPU (`bench/scaling/README.md`)."),
    files=(f"scaling/{DTYPE}/*/*.json", f"scaling/{DTYPE}_cross/*/*/*.json", f"scaling/{DTYPE}_repeat/*/*/*.json",
           "scaling/bfloat16/*/*.json"),
    results="""Every arm on every public shape:
<!-- claim:scaling-table --><!-- /claim -->

![Peak memory against parameters, log-log, one colour per arm](plots/scaling/memory.png)

![Seconds per new token against parameters, log-log, one colour per arm](plots/scaling/time.png)

Log-log slopes against parameters:
<!-- claim:scaling-slopes --><!-- /claim -->

The peer beside lowrank-es, shape by shape: <!-- claim:scaling-peer --><!-- /claim -->

`evotune estimate` beside every cell it was fitted on (in sample), then each shape predicted by a fit on the other
shapes' cells alone, what a shape the study never ran can expect (`evotune estimate` prints each method's worst such
error beside its seconds):
<!-- claim:scaling-estimate --><!-- /claim -->""",
    meaning=("scaling-largest", "scaling-memory-beside-inference", "scaling-speed-beside-inference",
             "scaling-smaller-units", "scaling-peer-meaning", "scaling-estimate-meaning"),
    rerun="""`python -m bench.scaling.run --cache CACHE_DIR --commit` runs every missing cell (resumable; a cell of
another machine type goes under `bench/results/scaling/float32_cross/`, where the fit reads it beside the study's
own), `python -m bench.scaling.fit` fits `evotune estimate`'s coefficients, `python -m bench.scaling.plots` draws the
plots; `python -m bench.labbook.render` renders this page from them.""",
)

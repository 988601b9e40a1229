"""The scaling study's quoted text (docs/benchmarks/scaling.md and the README's line), rendered from
bench/results/scaling/ alone (bench/claims/ registers CLAIMS): the table of every arm x shape, the largest model each
method trains here, the peer beside lowrank-es, the fitted slopes and `evotune estimate` beside the measured cells.
Until every cell is in, each text says how many are.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from .arms import ARMS, time_fraction
from .run import DTYPE, RESULTS
from .shapes import SHAPES

# the public shapes a CPU runs: the table, the largest model each method trains and the slopes; the shapes of other
# proportions (shapes.PROPORTIONS) are there for the estimate's fit and show in its table alone
CPU_SHAPES = [name for name, shape in SHAPES.items() if not shape.gpu_only and shape.published]
METHOD_ARMS = ["full_es", "full_es_batched", "lowrank", "es_lora", "essa", "grpo_lora", "grpo_full",
               "grpo_full_accumulation4", "sft_lora"]


def records(results: Path = RESULTS / DTYPE) -> dict[tuple[str, str], dict[str, Any]]:
    """The public shapes' cells (CPU_SHAPES), by (shape, arm): the shapes of other proportions are the fit's alone."""
    return {(path.parent.name, path.stem): json.loads(path.read_text()) for path in sorted(results.glob("*/*.json"))
            if path.parent.name in SHAPES and SHAPES[path.parent.name].published}


def _cell(record: dict[str, Any] | None, generation: dict[str, Any] | None) -> str:
    """One table cell: peak GiB, s/iteration, new tokens/s and ES's fraction of pure inference, or why not."""
    if record is None:
        return "not yet run"
    if record["status"] == "predicted not to fit":
        return f"predicted not to fit ({_asked(record)})"
    if record["status"] == "did not fit":
        return f"did not fit (stopped at {record['stopped_at_mib'] / 1024:,.1f} GiB)"
    text = f"{record['peak_rss_mib'] / 1024:.1f} GiB, {record['seconds_per_iteration']:,.0f} s/it"
    if record.get("new_tokens_per_second"):
        text += f", {record['new_tokens_per_second']:,.0f} tok/s"
        if generation and generation.get("new_tokens_per_second") and ARMS[record["arm"]]["command"] == "train":
            text += f" ({record['new_tokens_per_second'] / generation['new_tokens_per_second']:.0%} of inference)"
    if record.get("fraction_of_unit", 1.0) < 1.0:
        text += f" [{record['fraction_of_unit']:g} unit]"
    for attempt in record.get("did_not_fit_at", []):  # a larger unit stopped by the guard before this one ran
        stopped = attempt["stopped_at_mib"] / 1024
        text += f" ({attempt['fraction_of_unit']:g} unit did not fit: stopped at {stopped:,.1f} GiB)"
    if record.get("shared_machine"):
        text += " (timed beside other work)"
    return text


def table(results: Path = RESULTS / DTYPE) -> str:
    found = records(results)
    header = "| arm | " + " | ".join(f"{name} ({SHAPES[name].parameters() / 1e9:.2f}B)" for name in CPU_SHAPES) + " |"
    lines = [header, "|---" * (len(CPU_SHAPES) + 1) + "|"]
    for arm in ARMS:
        cells = [_cell(found.get((shape, arm)), found.get((shape, "generation"))) for shape in CPU_SHAPES]
        lines.append(f"| {ARMS[arm]['label']} | " + " | ".join(cells) + " |")
    return "\n\n" + "\n".join(lines) + "\n\n"


def progress(results: Path = RESULTS / DTYPE) -> str:
    found = records(results)
    total = len(CPU_SHAPES) * len(ARMS)
    ran = [record for record in found.values() if record["status"] == "ran"]
    machines = sorted({record["machine"]["cpu"] for record in ran})
    probes = sorted({record["speed_probe"]["probe_s"] for record in ran})
    text = (f"{len(found)} of the {total} CPU cells are in ({len(ran)} ran, "
            f"{sum(record['status'] != 'ran' for record in found.values())} did not fit or were predicted not to)")
    if ran:
        text += (f", measured on {' and '.join(machines)} ({ran[0]['machine']['threads']} threads, "
                 f"{DTYPE}, torch {ran[0]['machine']['torch']}; speed probe "
                 f"{', '.join(f'{probe:.2f}' for probe in probes)} s)")
    return text + "."


def _unit(sizes: dict[str, int]) -> str:
    return ", ".join(f"{count} {name[:-1] if count == 1 else name}" for name, count in sizes.items())


def _asked(record: dict[str, Any]) -> str:
    """What a cell predicted not to fit asked for: the whole unit, and the smallest unit where it was smaller."""
    text = f"{record['predicted_peak_mib'] / 1024:,.1f} GiB"
    smallest = record.get("predicted_peak_at_smallest_unit_mib")
    if smallest is not None and record.get("smallest_unit"):
        text += f", {smallest / 1024:,.1f} GiB at {_unit(record['smallest_unit'])}"
    return text


def _why_not(record: dict[str, Any]) -> str:
    if record["status"] == "predicted not to fit":
        return f"predicted to need {_asked(record)}"
    return f"stopped at {record['stopped_at_mib'] / 1024:,.1f} GiB"


def largest(results: Path = RESULTS / DTYPE) -> str:
    """One sentence a user can act on: the methods grouped by the largest shape each ran on here, with their peaks,
    the smaller unit where one was run, and why the next shape up did not fit."""
    found = records(results)
    groups: dict[str | None, list[str]] = {}
    for arm in METHOD_ARMS:
        if any((shape, arm) in found for shape in CPU_SHAPES):
            ran = [shape for shape in CPU_SHAPES if found.get((shape, arm), {}).get("status") == "ran"]
            groups.setdefault(max(ran, key=lambda name: SHAPES[name].parameters()) if ran else None, []).append(arm)
    if not groups:
        return "No cell has run yet."
    limits = {record["limit_mib"] for record in found.values()}
    complete = all((shape, arm) in found for shape in CPU_SHAPES for arm in METHOD_ARMS)
    parts = []
    for shape in sorted(groups, key=lambda name: -SHAPES[name].parameters() if name else 0):
        arms = groups[shape]
        labels = ", ".join(ARMS[arm]["short"] for arm in arms[:-1]) + (" and " if len(arms) > 1 else "") + \
            ARMS[arms[-1]]["short"]
        if shape is None:
            parts.append(f"{labels}: none of the shapes")
            continue
        peaks = sorted(found[(shape, arm)]["peak_rss_mib"] / 1024 for arm in arms)
        said = (f"{labels} up to {shape} ({SHAPES[shape].parameters() / 1e9:.2f}B parameters; peak "
                + (f"{peaks[0]:.1f}" if peaks[0] == peaks[-1] else f"{peaks[0]:.1f}-{peaks[-1]:.1f}") + " GiB")
        smaller = [arm for arm in arms  # below what the shape's size allows: cut for memory (cell.run_cell)
                   if found[(shape, arm)].get("fraction_of_unit", 1.0) < time_fraction(SHAPES[shape].parameters())]
        for arm in smaller:  # a unit cut for memory, not for time, is part of what fits
            said += f", {ARMS[arm]['short']} only at {_unit(found[(shape, arm)]['unit'])}"
        bigger = sorted((name for name in CPU_SHAPES if SHAPES[name].parameters() > SHAPES[shape].parameters()),
                        key=lambda name: SHAPES[name].parameters())
        for arm in arms:  # the next shape up this arm was tried on, and why it did not fit there
            refused = next((name for name in bigger if (name, arm) in found), None)
            if refused:
                said += f"; {ARMS[arm]['short']} at {refused}: {_why_not(found[(refused, arm)])}"
        parts.append(said + ")")
    machine = next(iter(found.values()))["machine"]
    limit = "-".join(sorted({f"{limit / 1024:.1f}" for limit in (min(limits), max(limits))}))
    head = (f"On {machine['threads']} cores of {machine['cpu']} with a memory limit of {limit} GiB per cell"
            + ("" if complete else ", among the shapes measured so far") + ": ")
    return head + "; ".join(parts) + "."


def slope(records_of_arm: list[dict[str, Any]], value) -> float | None:
    """The log-log slope of `value` against parameters over an arm's cells (least squares), or None under two."""
    points = [(math.log(record["parameters"]), math.log(value(record))) for record in records_of_arm]
    if len(points) < 2:
        return None
    mean_x, mean_y = statistics.fmean(x for x, _ in points), statistics.fmean(y for _, y in points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else None


def ran_by_arm(results: Path = RESULTS / DTYPE) -> dict[str, list[dict[str, Any]]]:
    found = records(results)
    return {arm: sorted((record for (shape, name), record in found.items()
                         if name == arm and record["status"] == "ran" and shape in CPU_SHAPES),
                        key=lambda record: record["parameters"]) for arm in ARMS}


def seconds_per_unit(record: dict[str, Any]) -> float:
    """Seconds per candidate-token (ES, generation, peer) or completion-token (GRPO), or per sequence (SFT)."""
    tokens = record.get("new_tokens_per_iteration") or 0
    return record["seconds_per_iteration"] / tokens if tokens else record["seconds_per_iteration"] / 8


def slopes(results: Path = RESULTS / DTYPE) -> str:
    """Each arm's log-log slopes. Seconds are per token, so they compare across units; a peak is the cell's own
    unit's, and a smaller unit holds fewer sequences at once: the units column says where they differ."""
    lines = ["| arm | shapes | units run (fraction, smallest shape first) | peak memory ~ parameters^ | "
             "seconds per token ~ parameters^ |", "|---|---|---|---|---|"]
    for arm, found in ran_by_arm(results).items():
        memory = slope(found, lambda record: record["peak_rss_mib"])
        seconds = slope(found, seconds_per_unit)
        if memory is None:
            continue
        units = ", ".join(f"{record.get('fraction_of_unit', 1.0):g}" for record in found)
        lines.append(f"| {ARMS[arm]['label']} | {len(found)} | {units} | {memory:.2f} | {seconds:.2f} |")
    if len(lines) == 2:
        return "No arm has cells of two shapes yet: no slope to fit."
    return "\n\n" + "\n".join(lines) + "\n\n"


def _members(record: dict[str, Any]) -> str:
    """How many members a memory figure is for, where a cell ran a smaller unit (memory grows with them)."""
    return f" with {record['unit']['members']} members" if record.get("fraction_of_unit", 1.0) < 1.0 else ""


def peer(results: Path = RESULTS / DTYPE) -> str:
    """The peer's rows beside lowrank-es's at the same shapes."""
    found = records(results)
    parts = []
    for shape in CPU_SHAPES:
        theirs, ours = found.get((shape, "peer_torcheggroll")), found.get((shape, "lowrank"))
        if not theirs or not ours or ours["status"] != "ran":
            continue
        if theirs["status"] != "ran":
            parts.append(f"at {shape}, lowrank-es ran in {ours['peak_rss_mib'] / 1024:.1f} GiB{_members(ours)} and "
                         f"the peer was {_why_not(theirs)}")
            continue
        parts.append(f"at {shape}, the peer took {theirs['peak_rss_mib'] / 1024:.1f} GiB{_members(theirs)} and "
                     f"{seconds_per_unit(theirs) * 1000:.1f} ms per candidate-token, lowrank-es "
                     f"{ours['peak_rss_mib'] / 1024:.1f} GiB{_members(ours)} and "
                     f"{seconds_per_unit(ours) * 1000:.1f} ms "
                     f"({seconds_per_unit(theirs) / seconds_per_unit(ours):.1f}x)")
    return ("; ".join(parts) + ".") if parts else "No shape has both the peer's and lowrank-es's cells yet."


def estimate_beside_measured(results: Path = RESULTS / DTYPE) -> str:
    """`evotune estimate` (the committed coefficients) beside every measured cell it was fitted on."""
    from evotune.estimate.model import load_coefficients

    from .fit import errors, rows, worst

    coefficients = load_coefficients()
    found = rows(results)
    table_rows = errors(found, coefficients)
    lines = ["| shape | arm | peak measured | predicted | error | s/it measured | predicted | error |",
             "|---|---|---|---|---|---|---|---|"]
    for row in table_rows:
        lines.append(f"| {row['shape']} | {ARMS[row['arm']]['label']} | {row['measured_mib']:,.0f} MiB | "
                     f"{row['predicted_mib']:,.0f} MiB | {row['memory_error']:+.0%} | {row['measured_s']:,.1f} | "
                     f"{row['predicted_s']:,.1f} | {row['time_error']:+.0%} |")
    memory, seconds = worst(table_rows)
    lines.append("")
    shapes = coefficients.get("shapes", [])
    lines.append(f"Worst over the {len(table_rows)} cells: memory {memory:.0%}, time {seconds:.0%}. The coefficients "
                 f"were fitted on these same cells, of {len(shapes)} model size(s) ({', '.join(shapes)})"
                 + (": until cells of 3 sizes are in, a prediction for another size is not checked." if len(shapes) < 3
                    else "."))
    # fitted with the coefficients (the test of the committed fit checks them), not fitted again here
    held_out = {shape: (error["memory"], error["time"])
                for shape, error in (coefficients.get("held_out_error") or {}).get("by_shape", {}).items()}
    if held_out:
        machines = {}
        for row in found:
            machines.setdefault(row["record"]["shape"], set()).add(row["record"]["machine"]["cpu"])
        lines += ["", "Each shape predicted by a fit on the other shapes' cells alone (leave one shape out: its cells' "
                  "worst errors, what `evotune estimate` prints beside each method as `time ±`):", "",
                  "| shape | parameters | layers x hidden size | measured on | worst memory error | worst time error |",
                  "|---|---|---|---|---|---|"]
        for shape, (memory, seconds) in held_out.items():
            spec = SHAPES[shape]
            lines.append(f"| {shape} | {spec.parameters() / 1e6:,.0f}M | {spec.num_hidden_layers} x "
                         f"{spec.hidden_size} | {', '.join(sorted(machines[shape]))} | {memory:.0%} | {seconds:.0%} |")
    return "\n\n" + "\n".join(lines) + "\n\n"


CLAIMS = {"scaling-progress": progress, "scaling-table": table, "scaling-largest": largest, "scaling-slopes": slopes,
          "scaling-peer": peer, "scaling-estimate": estimate_beside_measured}

"""What the method study's arms learned past the training template: each arm's held-out score in the template beside
its score on the transfer split (the same sums asked in other wordings, subtraction, one more digit:
evotune.tasks.phrasings), and MeZO (Malladi et al. 2023, arXiv 2305.17333) paired with full-es, the same
full-parameter space with 2 candidates per step against full-es's population.

A run scored before the transfer split existed has no transfer score, and its weights are gone: run.py trains it
again (same setting, seed and budget) into transfer/main/, and its row reads the rerun's transfer score beside the
rerun's own template score; until then the row says so, and nothing estimates it.
The base model's transfer score is measured again (run.py's `transfer/base/` job), as its first file predates it.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from bench.method_matrix.arms import METHODS, TASKS, TRANSFER_TASK, rerun_path
from bench.method_matrix.rows import (
    STEP_MATCHED_MARK,
    STUDY,
    Arm,
    arm,
    arms,
    heldout,
    load,
    paired_gain,
    paired_over_seeds,
    separated,
)

BASE_TRANSFER = "transfer/base/arithmetic.json"


def base_transfer(results: Path = STUDY) -> dict[str, Any] | None:
    data = load(results, BASE_TRANSFER)
    return data["heldout"].get("transfer") if data else None


def transfers(found: Arm) -> list[dict[str, Any]]:
    """The transfer records of an arm's runs that have one (runs scored before the split have none)."""
    return [run.heldout["transfer"] for run in found.runs if "transfer" in run.heldout]


def rerun_files(results: Path, found: Arm) -> list[dict[str, Any]]:
    """The result files of an arm's main runs trained again to be scored past the template (run.py's reruns: their
    first runs predate the transfer split), in seed order."""
    records = [load(results, rerun_path(found.task, found.method, seed)) for seed in TASKS[found.task]["seeds"]]
    return [record for record in records if record is not None]


def reruns(results: Path, found: Arm) -> list[dict[str, Any]]:
    """The held-out records of an arm's reruns (rerun_files), each holding its own template score too."""
    return [record["heldout"] for record in rerun_files(results, found)]


def matched_reruns(results: Path, found: Arm) -> list[dict[str, Any]]:
    """An arm's reruns that took its reruns' median steps on another machine type (run.py --step-matched)."""
    return [record for record in rerun_files(results, found) if record["training"].get("step_matched")]


def matched_text(results: Path, found: Arm) -> str:
    """'' or how many of an arm's reruns were step-matched, with the mark the per-seed tables use, where they ran and
    the steps they took (their seconds are not compared)."""
    matched = matched_reruns(results, found)
    if not matched:
        return ""
    steps = sorted({record["training"]["step_matched"]["steps"] for record in matched})
    cpus = " / ".join(sorted({record["machine"]["cpu"] for record in matched}))
    return (f"; {len(matched)} of them step-matched{STEP_MATCHED_MARK} on {cpus}, at "
            f"{' / '.join(map(str, steps))} steps, the median of the arm's reruns on the study's machine type")


def transfer_records(results: Path, found: Arm) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the arm's transfer records, the held-out records of the reruns they come from): its main runs' own where
    they have them (no reruns then), else its reruns' (reruns)."""
    records = transfers(found)
    if records:
        return records, []
    again = reruns(results, found)
    return [record["transfer"] for record in again], again


def _gain_text(records: list[dict[str, Any]], base: dict[str, Any] | None) -> str:
    """The paired gain of the transfer records over the base model on the same questions (pooled over seeds)."""
    if base is None or any(record["n"] != base["n"] for record in records):
        return ""
    mean, low, high = paired_gain("".join(record["correct"] for record in records), base["correct"] * len(records))
    return f", {mean:+.1f} [{low:+.1f}, {high:+.1f}] over the base"


def _transfer_cell(found: Arm, base: dict[str, Any] | None, results: Path) -> str:
    if not found.runs:
        return "not run yet"
    records, again = transfer_records(results, found)
    if not records:
        return "not measured yet: its runs predate the transfer split and wait to be trained again"
    mean = statistics.mean(record["accuracy"] for record in records)
    if not again:
        return f"{100 * mean:.1f}% ({len(records)} seeds){_gain_text(records, base)}"
    template = statistics.mean(record["accuracy"] for record in again)
    # the rerun's own template score beside its transfer score: one run's two scores, never two runs' scores mixed
    return (f"{100 * mean:.1f}% ({len(again)} of {found.planned} seeds trained again, which scored "
            f"{100 * template:.1f}% in the template{matched_text(results, found)}){_gain_text(records, base)}")


def transfer_table(results: Path = STUDY) -> str:
    """Every arm's template score beside its transfer score on 2-digit addition, with the paired gain over the base
    model on the same transfer questions where both were measured."""
    base = base_transfer(results)
    base_record = heldout(results, "base/arithmetic.json")  # its accuracy measured again at the scored budget
    lines = ["", "", "| method | in the training template: held-out, mean | past it: transfer split, mean, gain over "
             "the base [95% interval] |", "|---|---|---|"]
    if base_record:
        base_text = (f"{100 * base['accuracy']:.1f}% (n = {base['n']})" if base else "not measured yet "
                     f"(`python -m bench.method_matrix.run --only {BASE_TRANSFER}`)")
        lines.append(f"| base model | {100 * base_record['accuracy']:.1f}% | {base_text} |")
    for found in arms(results, TRANSFER_TASK):
        template = f"{found.mean:.1f}% ({len(found.runs)} seeds)" if found.runs else "not run yet"
        lines.append(f"| {found.label} | {template} | {_transfer_cell(found, base, results)} |")
    return "\n".join(lines) + "\n\n"


def _population(found: Arm) -> str:
    sizes = sorted({run.data["training"]["keys"].get("population_size") for run in found.runs})
    return "/".join(str(size) for size in sizes)


def mezo_answer(results: Path = STUDY) -> str:
    """MeZO against full-es on 2-digit addition: the same space, 2 candidates per step against full-es's population;
    each arm's mean and steps, the paired per-question difference over the seeds both ran (95% interval), and
    whether the study's rule separates them (rows.separated: the paired interval and the seeds' spread both)."""
    mezo, full = arm(results, TRANSFER_TASK, "mezo"), arm(results, TRANSFER_TASK, "full_es")
    if not mezo.runs or not full.runs:
        return f"mezo has {len(mezo.runs)} of {mezo.planned} runs on 2-digit addition: not compared yet"
    paired = paired_over_seeds(mezo, full)
    if paired is None:
        return "mezo and full-es share no seed on 2-digit addition yet: not compared"
    mean, low, high, shared = paired
    # the study's rule for a ranking (rows.separated): the gap beyond both arms' seed spread as well
    verdict = (("mezo ahead" if mean > 0 else "full-es ahead") if separated(mezo, full) else
               "not separated (a gap within the seed spread, or a paired interval that holds 0)")
    clock = {run.data["training"]["keys"].get("training_clock", "wall") for run in mezo.runs}
    return (f"on 2-digit addition, mezo ({_population(mezo)} candidates per step, {mezo.mean_of('steps'):.0f} steps "
            f"per run) scored {mezo.mean:.1f}% over {len(mezo.runs)} seeds, full-es ({_population(full)} candidates "
            f"per step, {full.mean_of('steps'):.0f} steps) {full.mean:.1f}% over {len(full.runs)}; paired over the "
            f"{shared} seeds both ran, mezo minus full-es {mean:+.1f} points [{low:+.1f}, {high:+.1f}]: "
            f"{verdict} (mezo's budget counted in {' and '.join(sorted(clock))} seconds, full-es's in wall seconds, "
            "one thread each)")


CLAIMS = {"matrix-transfer-table": transfer_table, "matrix-mezo-answer": mezo_answer}
assert "mezo" in METHODS and "full_es" in METHODS

"""Helpers the claim modules share: where the result files are, loading one, and formatting shared shapes."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: bench/claims/_common.py
RESULTS = ROOT / "bench" / "results"
SPAN = re.compile(r"<!-- claim:(?P<name>[\w-]+) -->(?P<text>.*?)<!-- /claim -->", re.S)
QUOTING_FILES = ("README.md", "docs/**/*.md")


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def relation(value: float, other: float, larger: str, smaller: str, alike: str, tolerance: float = 0.05) -> str:
    """The word a sentence uses to compare `value` with `other`, computed, so a rerun that reverses an order cannot
    leave the old word behind: `alike` within `tolerance` (relative), else `larger` or `smaller`."""
    if abs(value - other) <= tolerance * max(abs(value), abs(other)):
        return alike
    return larger if value > other else smaller


def premise(holds: bool, claim: str, sentence: str) -> None:
    """Stop the render when a claim's words no longer fit its data: `sentence` (what the words say) is named, so a
    rerun that changes the result has its sentence rewritten, never printed beside a result it no longer describes."""
    if not holds:
        raise ValueError(f"claim {claim!r}: its words say {sentence}, and its result files no longer do; rewrite it")


def seeds_text(values) -> str:
    return " / ".join(pct(value) for value in values)


def compare_runs(compare: dict, prefix: str) -> list[dict]:
    """The runs of an `evotune compare` directory whose directory name starts with PREFIX, by seed."""
    return sorted((run for run in compare["runs"] if run["run"].rsplit("/", 1)[-1].startswith(prefix)),
                  key=lambda run: run["seed"])


def interval_text(entry: dict) -> str:
    low, high = entry["ci95"]
    return f"{pct(entry['mean'])} [{100 * low:.1f}, {100 * high:.1f}]"


def spread_row(entry: dict, unit: str = "") -> list[str]:
    low, high = entry["std_ci95"]
    return [", ".join(f"{value:.1f}" for value in entry["per_seed"]) + unit, f"{entry['mean']:.1f}{unit}",
            f"{entry['std']:.1f} [{low:.1f}, {high:.1f}]"]


def speedups_text(data: dict) -> str:
    ratios = data["speedup_over_one_at_a_time"]
    same = set(data["identical_completions"].values())
    return (" / ".join(f"{ratios[key]:.2f}x" for key in sorted(ratios, key=lambda key: int(key.split("_")[1])))
            + f", {'all ' + same.pop() if len(same) == 1 else 'not all'} completions identical")


def machine_label(path: str) -> str:
    machine = load(path).get("machine")
    if isinstance(machine, dict):
        return f"{machine.get('cpu', '?')}, torch {machine.get('torch', '?')}"
    return str(machine or "CPU")

"""The GPU check's report (check.py): its rows, written after every step so a killed run keeps what it measured;
the rows carried from earlier reports on a card of the same name; and the plan of a run, printed without a device."""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

Step = tuple[str, Callable[[], Any], float]  # (row name, what measures it, the seconds it is estimated to take)


class Report:
    """The report's rows, written after every step, and the time left for more."""

    def __init__(self, output: Path, budget_seconds: float, facts: dict[str, Any], previous: list[Path] = (),
                 remeasure: tuple[str, ...] | list[str] = ()):
        self.output, self.deadline, self.started = output, time.perf_counter() + budget_seconds, time.perf_counter()
        self.results: dict[str, Any] = {"command": "python -m bench.gpu_check.check " + " ".join(sys.argv[1:]),
                                         "facts": facts}
        self.carried = {name: row for name, row in carried_rows(previous, facts).items() if name not in remeasure}
        self.write()

    def write(self) -> None:
        self.output.parent.mkdir(parents=True, exist_ok=True)
        self.results["elapsed_s"] = round(time.perf_counter() - self.started, 1)
        self.output.write_text(json.dumps(self.results, indent=2, default=str) + "\n")

    def step(self, name: str, work: Callable[[], Any], needs_seconds: float = 0.0) -> None:
        """One check: its result, or its error (the script goes on); carried from an earlier run when one on this
        card measured it; skipped when fewer than `needs_seconds` are left before the deadline."""
        left = self.deadline - time.perf_counter()
        if name in self.carried:
            self.results[name] = self.carried[name]
            print(f"gpu_check: {name}: carried from {self.carried[name]['carried_from']}", file=sys.stderr, flush=True)
        elif left < needs_seconds:
            self.results[name] = {"skipped": f"{left:.0f} s left, the step needs about {needs_seconds:.0f}"}
        else:
            started = time.perf_counter()
            try:
                self.results[name] = work()
            except Exception as error:  # noqa: BLE001 - a failed check is a row of the report, not the end of it
                self.results[name] = {"error": f"{type(error).__name__}: {error}",
                                      "traceback": traceback.format_exc()[-2000:]}
            row = self.results[name]
            state = "FAIL " + row["error"] if isinstance(row, dict) and "error" in row else "ok"
            print(f"gpu_check: {name} ({time.perf_counter() - started:.1f} s): {state}", file=sys.stderr, flush=True)
        self.write()


def carried_rows(previous: list[Path], facts: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The measured rows (not skipped, not failed) of earlier reports from a card of the same name as this one."""
    rows: dict[str, dict[str, Any]] = {}
    for path in previous:
        report = json.loads(Path(path).read_text())
        if report.get("facts", {}).get("name") != facts.get("name"):
            continue
        for name, row in report.items():
            if isinstance(row, dict) and name != "facts" and not {"skipped", "error"} & row.keys():
                rows.setdefault(name, {**row, "carried_from": row.get("carried_from", Path(path).name)})
    return rows


def print_plan(steps: list[Step], args: argparse.Namespace) -> None:
    """What a run on a card named --card would do with these --previous reports: each row carried or measured,
    and whether its estimate fits --budget-seconds (no device is touched)."""
    carried = {name: row for name, row in carried_rows(args.previous, {"name": args.card}).items()
               if name not in args.remeasure}
    used = 0.0
    for name, _, seconds in steps:
        if name in carried:
            print(f"{name:34} carried from {carried[name]['carried_from']}")
        elif used + seconds <= args.budget_seconds:
            used += seconds
            print(f"{name:34} measure, ~{seconds:.0f} s (~{used:.0f} s of {args.budget_seconds:.0f})")
        else:
            print(f"{name:34} skipped: ~{seconds:.0f} s does not fit")

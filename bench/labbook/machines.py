"""The machines a lab-book page's result files record, with their speed probes: the line under each page's Setup,
a claim of its own (`SLUG-machines`), so a rerun on another machine refreshes it."""

from __future__ import annotations

import json
from collections import defaultdict

from bench.common import RESULTS


def machine_of(data: dict) -> tuple[str, str] | None:
    """(the machine, its speed probe's setting) as a result file records them, or None where it does not."""
    machine, facts = data.get("machine"), data.get("facts")
    if isinstance(machine, dict):
        cpu = machine.get("cpu", "a CPU") + (" with AMX" if machine.get("amx_bf16") else "")
        return f"{cpu}, torch {machine.get('torch', '?')}", ""  # threads are the protocol's, under Setup
    if isinstance(facts, dict) and facts.get("name"):  # the GPU check's record
        return f"{facts['name']}, torch {facts.get('torch', '?')}", ""
    if isinstance(data.get("environment"), dict):
        environment = data["environment"]
        return f"{environment.get('devices', 'a machine')}, torch {environment.get('torch', '?')}", ""
    return None


def probe_of(data: dict) -> tuple[str, float] | None:
    probe = data.get("speed_probe")
    if isinstance(probe, dict) and isinstance(probe.get("probe_s"), (int, float)):
        return f"{probe.get('dtype', '?')}, {probe.get('threads', '?')} thread(s)", float(probe["probe_s"])
    return None


def machines_text(globs: tuple[str, ...]) -> str:
    """Which machines made the page's result files, with how many files each and its speed probe's range."""
    files = sorted({path for pattern in globs for path in RESULTS.glob(pattern) if path.suffix == ".json"})
    if not files:
        return "No result file yet: the study has not run."
    counts: dict[str, int] = defaultdict(int)
    probes: dict[str, list[float]] = defaultdict(list)
    unrecorded = 0
    for path in files:
        try:
            data = json.loads(path.read_text())
        except ValueError:
            unrecorded += 1
            continue
        found = machine_of(data) if isinstance(data, dict) else None
        if found is None:
            unrecorded += 1
            continue
        counts[found[0]] += 1
        probe = probe_of(data)
        if probe:
            probes[f"{found[0]}: {probe[0]}"].append(probe[1])
    parts = [f"{label} ({count} file{'s' if count != 1 else ''})" for label, count in sorted(counts.items())]
    if unrecorded:
        parts.append(f"{unrecorded} file{'s' if unrecorded != 1 else ''} with no machine record")
    counted = "the result file records" if len(files) == 1 else f"the {len(files)} result files record"
    text = f"Machines, as {counted} them: " + "; ".join(parts) + "."
    if probes:
        ranges = [f"{label}, {min(values):.1f}-{max(values):.1f} s over {len(values)} runs" if len(values) > 1
                  else f"{label}, {values[0]:.1f} s" for label, values in sorted(probes.items())]
        text += " Speed probe (`evotune doctor --speed`'s workload) before the runs: " + "; ".join(ranges) + "."
    return text

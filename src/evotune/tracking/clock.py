"""The clock a training budget counts: wall seconds, or the CPU seconds of the run's own process tree.

`max_training_seconds` counts wall time by default, which a neighbour's load stretches: on a shared 2-core machine a
run beside another gets about half the steps. `training_clock: cpu` counts the user + system CPU seconds of the run's
process and every process under it (a vLLM engine's core and workers, a tokenizer's pool), so a budget buys about
the same work whatever runs beside it, provided OpenMP's idle threads sleep rather than spin (the `evotune` command
sets OMP_WAIT_POLICY=PASSIVE for such a run: cli/openmp.py); what the machine's own speed buys still differs (record
`evotune doctor --speed`).
Every step records both (`time_s`, wall; `cpu_s`, the tree's CPU seconds), whichever the budget counts.
"""

from __future__ import annotations

import time


def process_tree_cpu_seconds() -> float:
    """User + system CPU seconds of this process, its live descendants and the children it has waited for."""
    import psutil

    process = psutil.Process()
    total = 0.0
    for member in [process, *process.children(recursive=True)]:
        try:
            times = member.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # ended between the listing and the reading: its time is in its parent's children_* below
        total += times.user + times.system
    times = process.cpu_times()
    return total + times.children_user + times.children_system


class StepClock:
    """Times one step on both clocks; `seconds(clock)` is what the budget counts."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0
        self._wall_start = self._cpu_start = 0.0

    def start(self) -> None:
        self._wall_start, self._cpu_start = time.perf_counter(), process_tree_cpu_seconds()

    def stop(self) -> None:
        self.wall = time.perf_counter() - self._wall_start
        self.cpu = max(process_tree_cpu_seconds() - self._cpu_start, 0.0)  # a child that ended unwaited: never < 0

    def seconds(self, clock: str) -> float:
        """The step's seconds on `clock` (the config's `training_clock`: wall or cpu)."""
        return self.cpu if clock == "cpu" else self.wall

"""The scaling study's memory guard: a cell's process tree runs under a limit below the machine's free memory, and a
cell that crosses it is stopped and recorded as "did not fit" (with the memory it had reached), never left to swap
or to make the kernel kill other work. A watchdog reads the tree's resident memory every POLL_SECONDS; an
address-space limit would not do, as torch and its allocators reserve far more address space than they touch.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

POLL_SECONDS = 0.2
RESERVE_MIB = 2048  # left free for the system and the runner beside the cell


def available_mib() -> float:
    """MemAvailable of /proc/meminfo, in MiB: what a new process can take without the machine swapping."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def default_limit_mib() -> float:
    return available_mib() - RESERVE_MIB


@dataclass
class Outcome:
    exit_code: int
    wall_s: float
    peak_rss_mib: float  # the most the tree held at a reading, or wait4's peak of the cell's process if higher
    stopped_at_mib: float | None  # set when the guard stopped the tree for crossing the limit


def tree_rss_mib(process) -> float:
    """Resident memory of a process and its descendants, in MiB (a process gone meanwhile counts 0)."""
    import psutil

    total = 0
    for member in [process, *process.children(recursive=True)]:
        try:
            total += member.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def run_guarded(argv: list[str], limit_mib: float, log: Path, environment: dict[str, str] | None = None) -> Outcome:
    """Run argv with stdout and stderr to `log`; stop its whole tree (SIGKILL) once it holds more than limit_mib."""
    import psutil

    started, peak, stopped = time.perf_counter(), 0.0, None
    with log.open("w") as handle:
        child = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=environment,
                                 start_new_session=True)  # its own group: the stop reaches every descendant
        process = psutil.Process(child.pid)
        while True:
            finished = os.wait4(child.pid, os.WNOHANG)
            if finished[0] == child.pid:
                _, status, usage = finished
                code = os.waitstatus_to_exitcode(status)
                peak = max(peak, usage.ru_maxrss / 1024)
                break
            try:
                held = tree_rss_mib(process)
            except psutil.Error:
                held = 0.0
            peak = max(peak, held)
            if held > limit_mib and stopped is None:
                stopped = held
                os.killpg(child.pid, 9)
            time.sleep(POLL_SECONDS)
    child.returncode = code  # reaped by wait4 above: Popen must not wait for it again
    return Outcome(code, round(time.perf_counter() - started, 1), round(peak, 1),
                   round(stopped, 1) if stopped is not None else None)

"""The scaling study's memory guard: a cell's process tree runs under a limit below the machine's free memory, and a
cell that crosses it is stopped and recorded as "did not fit" (with the memory it had reached), never left to swap
or to make the kernel kill other work. A watchdog reads the tree's resident memory every POLL_SECONDS; an
address-space limit would not do, as torch and its allocators reserve far more address space than they touch.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

POLL_SECONDS = 0.2
GPU_POLLS = 3  # a GPU reading every third poll (0.6 s)
RESERVE_MIB = 2048  # left free for the system and the runner beside the cell
# The cell runs under this small launcher, which waits for it and writes its peak (wait4's ru_maxrss) to a file.
# Spawned from the runner directly, the peak would include the runner's own pages (the kernel keeps the larger of
# the image before exec and after); from the launcher, only the launcher's few MiB.
LAUNCHER = ("import os, sys\n"
            "pid = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ)\n"
            "_, status, usage = os.wait4(pid, 0)\n"
            "open(sys.argv[1], 'w').write(f'{usage.ru_maxrss} {usage.ru_utime + usage.ru_stime}')\n"
            "code = os.waitstatus_to_exitcode(status)\n"
            "os.kill(os.getpid(), -code) if code < 0 else sys.exit(code)\n")  # a signal passed on as itself


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
    peak_rss_mib: float  # the highest of the readings: the cell's own high-water mark plus its descendants' RSS
    stopped_at_mib: float | None  # set when the guard stopped the tree for crossing the limit
    cpu_s: float | None = None  # the cell's own CPU seconds (user + system, every descendant it waited for)
    machine_busy_s: float | None = None  # CPU seconds the whole machine was busy meanwhile (/proc/stat)
    watchdog_cpu_s: float = 0.0  # this process's own CPU meanwhile (its readings of the tree's memory)
    peak_gpu_mib: float | None = None  # on a GPU: the most the tree's processes held on it (nvidia-smi)

    @property
    def other_work_cpu_s(self) -> float | None:
        """CPU seconds spent by anything but the cell and its watchdog while it ran: the cell's timing is the
        machine's alone only when this is small against its own CPU seconds."""
        if self.cpu_s is None or self.machine_busy_s is None:
            return None
        return round(max(0.0, self.machine_busy_s - self.cpu_s - self.watchdog_cpu_s), 1)


def gpu_mib_by_pid(listing: str) -> dict[int, float]:
    """`nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits` as {pid: MiB}."""
    found: dict[int, float] = {}
    for line in listing.splitlines():
        pid, _, used = line.partition(",")
        if pid.strip().isdigit() and used.strip().replace(".", "", 1).isdigit():
            found[int(pid)] = found.get(int(pid), 0.0) + float(used)
    return found


def tree_gpu_mib(process) -> float:
    """GPU memory held by a process and its descendants now, in MiB (0 where nvidia-smi is missing)."""
    import psutil

    try:
        listing = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,"
                                  "nounits"], capture_output=True, text=True, timeout=10).stdout
        members = {process.pid, *(child.pid for child in process.children(recursive=True))}
    except (OSError, subprocess.SubprocessError, psutil.Error):
        return 0.0
    return sum(used for pid, used in gpu_mib_by_pid(listing).items() if pid in members)


def machine_busy_seconds() -> float:
    """CPU seconds every core has spent busy since boot (/proc/stat's first line, all but idle and iowait)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def tree_rss_mib(process) -> tuple[float, float]:
    """(resident memory now, and its high-water mark so far) of a process and its descendants, in MiB: the process's
    own VmHWM (its peak since it exec'd) plus its descendants' RSS now; a process gone meanwhile counts 0. wait4's
    ru_maxrss would not do: it also counts the parent's pages the child held between fork and exec."""
    import psutil

    now = peak = 0.0
    for member in [process, *process.children(recursive=True)]:
        try:
            rss = member.memory_info().rss
            now += rss
            peak += _high_water(member.pid) if member.pid == process.pid else rss
        except (psutil.Error, OSError):
            pass
    return now / 2**20, peak / 2**20


def _high_water(pid: int) -> float:
    """VmHWM of a process, in bytes (/proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise OSError(f"no VmHWM for process {pid}")


def run_guarded(argv: list[str], limit_mib: float, log: Path, environment: dict[str, str] | None = None,
                gpu: bool = False) -> Outcome:
    """Run argv with stdout and stderr to `log`; stop its whole tree (SIGKILL) once it holds more than limit_mib.
    gpu: also read the GPU memory its processes hold (every GPU_POLLS-th reading: nvidia-smi takes ~0.1 s)."""
    import psutil

    started, peak, stopped, cpu, gpu_peak, polls = time.perf_counter(), 0.0, None, None, 0.0, 0
    busy_before, own_before = machine_busy_seconds(), time.process_time()
    report = log.with_name(log.name + ".peak")
    report.unlink(missing_ok=True)
    launched = [sys.executable, "-S", "-c", LAUNCHER, str(report), shutil.which(argv[0]) or argv[0], *argv[1:]]
    with log.open("w") as handle:
        child = subprocess.Popen(launched, stdout=handle, stderr=subprocess.STDOUT, env=environment,
                                 start_new_session=True)  # its own group: the stop reaches every descendant
        process = psutil.Process(child.pid)
        while True:
            try:  # read before the exit check: the last reading comes as late as it can
                held, high = tree_rss_mib(process)
            except psutil.Error:
                held = high = 0.0
            peak = max(peak, high)
            polls += 1
            if gpu and polls % GPU_POLLS == 0:
                gpu_peak = max(gpu_peak, tree_gpu_mib(process))
            finished = os.waitpid(child.pid, os.WNOHANG)
            if finished[0] == child.pid:
                code = os.waitstatus_to_exitcode(finished[1])
                if report.is_file() and report.read_text().strip():  # the cell's own peak and CPU, from the launcher
                    maxrss, cpu_text = report.read_text().split()
                    peak, cpu = max(peak, int(maxrss) / 1024), float(cpu_text)
                break
            if held > limit_mib and stopped is None:
                stopped = held
                os.killpg(child.pid, 9)
            time.sleep(POLL_SECONDS)
    child.returncode = code  # reaped by waitpid above: Popen must not wait for it again
    return Outcome(code, round(time.perf_counter() - started, 1), round(peak, 1),
                   round(stopped, 1) if stopped is not None else None,
                   round(cpu, 1) if cpu is not None else None, round(machine_busy_seconds() - busy_before, 1),
                   round(time.process_time() - own_before, 1), round(gpu_peak, 1) if gpu else None)

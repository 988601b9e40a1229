"""Take a process's children down with it, even when it is killed with SIGKILL.

A process that holds a vLLM engine in vLLM's default shape (always on CUDA) has children: the engine core
and its workers (one per tensor-parallel rank). When the process is SIGKILLed (a killed Ray actor, the OOM
killer), nothing tells them: they were seen alive 90 s later, and on a GPU they would still hold the memory
a replacement needs. A watchdog, started by VLLMBackend in its own session (so a signal to the process
group does not reach it), polls the process, remembers its descendants, and when the process is gone
SIGKILLs every one of them still alive (checked by start time, so a reused pid is spared).

Run as `python -m evotune.backends.watchdog PID`; `start_watchdog()` does that for the calling process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

POLL_SECONDS = 0.5


def start_watchdog() -> subprocess.Popen:
    """Watch this process: its descendants die with it."""
    return subprocess.Popen([sys.executable, "-m", "evotune.backends.watchdog", str(os.getpid())],
                            start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def watch(pid: int, poll_seconds: float = POLL_SECONDS) -> list[int]:
    """Until `pid` exits, remember its descendants; then kill those still alive. Returns the pids killed."""
    import psutil

    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return []
    known: dict[int, float] = {}  # pid -> create_time, to tell a descendant from a later process with its pid
    while parent.is_running() and parent.status() != psutil.STATUS_ZOMBIE:
        try:
            for child in parent.children(recursive=True):
                if child.pid != os.getpid():  # the watchdog is a child of the process it watches
                    known.setdefault(child.pid, child.create_time())
        except psutil.NoSuchProcess:
            break
        time.sleep(poll_seconds)
    killed = []
    for child_pid, created in known.items():
        try:
            child = psutil.Process(child_pid)
            if child.create_time() == created:
                child.send_signal(signal.SIGKILL)
                killed.append(child_pid)
        except psutil.NoSuchProcess:
            continue
    return killed


if __name__ == "__main__":
    watch(int(sys.argv[1]))

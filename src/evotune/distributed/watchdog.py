"""Take a process's children down with it, even when it is killed with SIGKILL.

A Ray actor that holds a vLLM engine has children: the engine core (vLLM's default shape, always on CUDA)
and, with tensor parallelism, one worker per rank. When the actor is killed (`ray.kill`, the OOM killer,
a SIGKILL), nothing tells them: the engine core was seen alive 90 s later, and on a GPU it would still hold
the memory the replacement actor needs. A watchdog, started by the actor in its own session (so a signal
to the actor's process group does not reach it), polls the actor, remembers its descendants, and when the
actor is gone SIGKILLs every one of them still alive (checked by start time, so a reused pid is spared).

Run as `python -m evotune.distributed.watchdog PID`; `start_watchdog()` does that for the calling process.
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
    return subprocess.Popen([sys.executable, "-m", "evotune.distributed.watchdog", str(os.getpid())],
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

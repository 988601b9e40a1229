"""One writer per run directory: a lock file naming its holder (pid, host, command, start time).

Every command that writes a run directory (train, sft, grpo, sweep, export) takes the lock before it changes
anything there, `--overwrite` and `--resume` included, and gives it back when it ends. A second writer is refused
with the holder's name while the holder lives; a lock whose holder died (kill -9, a lost machine) is free again
(the operating system drops a dead process's flock) and is taken over with a note naming the dead holder. Readers
(`eval`, `compare`, `export` of a checkpoint) never take it. Within one process the lock is re-entrant: the
Python API may build a second Trainer on a directory its own process holds.

flock is kept by the kernel of the machine that took it: on a network file system shared by several machines,
two writers on different machines may not see each other's lock (the record still names the other holder).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import OutputError

LOCK_FILE = ".evotune-lock"


class RunLockedError(OutputError):
    """Another live process is writing this run directory."""


@dataclass
class RunLock:
    path: Path
    descriptor: int
    holders: int = 1


_HELD: dict[str, RunLock] = {}  # this process's locks, by directory: the lock is per process, not per object


def holder_record() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join([Path(sys.argv[0]).name,
                                                                                     *sys.argv[1:]]).strip(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %z")}


def describe(record: dict) -> str:
    if not record:  # the holder took the lock an instant ago and has not written its name yet
        return "another evotune process that is starting (its name is not written yet)"
    return (f"pid {record.get('pid', '?')} on {record.get('host', '?')}, `{record.get('command') or '?'}`, "
            f"started {record.get('started', '?')}")


def refusal(output_dir: str | Path, record: dict) -> str:
    return (f"{output_dir} is being written by another run: {describe(record)}. Wait for it to end, or stop it and "
            "resume this directory afterwards; to start a new run now, choose another output directory.")


def _read(descriptor: int) -> dict:
    os.lseek(descriptor, 0, os.SEEK_SET)
    text = os.read(descriptor, 1 << 16).decode("utf-8", errors="replace")
    with contextlib.suppress(ValueError):
        record = json.loads(text)
        return record if isinstance(record, dict) else {}
    return {}


def lock_path(output_dir: str | Path, name: str = LOCK_FILE) -> Path:
    return Path(output_dir).resolve() / name


def acquire(output_dir: str | Path, name: str = LOCK_FILE) -> RunLock:
    """Hold `output_dir`'s lock (the directory must exist; `name`: the lock file in it); raises RunLockedError
    naming a live holder."""
    path = lock_path(output_dir, name)
    key = str(path)
    if key in _HELD:
        _HELD[key].holders += 1
        return _HELD[key]
    while True:
        # read-only: a file open for writing would keep the file system from being remounted read-only (an
        # admin's remount must stop the run with a clear error, not fail); flock needs no write access
        descriptor = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            record = _read(descriptor)
            os.close(descriptor)
            raise RunLockedError(refusal(output_dir, record)) from None
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(descriptor).st_ino:
                break  # the file we locked is still the lock file (its last holder did not just unlink it)
        os.close(descriptor)
    previous = _read(descriptor)
    if previous:  # a holder that ended without giving the lock back: killed, or its machine lost
        print(f"evotune: note: taking over the lock of {output_dir} from {describe(previous)}, which ended "
              "without releasing it.", file=sys.stderr, flush=True)
    writer = os.open(path, os.O_WRONLY | os.O_TRUNC)  # the same file: this process holds its lock
    try:
        os.write(writer, json.dumps(holder_record()).encode())
        os.fsync(writer)
    finally:
        os.close(writer)
    lock = _HELD[key] = RunLock(path, descriptor)
    return lock


def release(output_dir: str | Path, name: str = LOCK_FILE) -> None:
    """Give back one hold of `output_dir`'s lock; the last one removes the lock file. Nothing if not held."""
    key = str(lock_path(output_dir, name))
    lock = _HELD.get(key)
    if lock is None:
        return
    lock.holders -= 1
    if lock.holders:
        return
    del _HELD[key]
    with contextlib.suppress(OSError):  # gone, or its file system remounted read-only: the unlock still frees it
        lock.path.unlink()  # before the unlock: a writer that opens the path next makes a new file
    os.close(lock.descriptor)


def holder(output_dir: str | Path) -> dict | None:
    """The record of a live process holding `output_dir`'s lock (another process), else None. Takes nothing."""
    path = Path(output_dir) / LOCK_FILE
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read(descriptor)
        fcntl.flock(descriptor, fcntl.LOCK_UN)  # free: its holder is gone
        return None
    finally:
        os.close(descriptor)


def is_held(output_dir: str | Path, name: str = LOCK_FILE) -> bool:
    return str(lock_path(output_dir, name)) in _HELD


@contextlib.contextmanager
def held(output_dir: str | Path, name: str = LOCK_FILE) -> Iterator[RunLock]:
    """The lock for the duration of a block (an export's, beside the directory it writes)."""
    lock = acquire(output_dir, name)
    try:
        yield lock
    finally:
        release(output_dir, name)

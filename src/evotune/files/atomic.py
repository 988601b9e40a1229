"""Writing files so that a kill or a power cut at any instant leaves the old version or the whole new one:
fsync of files and directories, and `staged`, a hidden sibling directory moved into place once complete.
Checkpoints, exports and the vLLM engine's model export all write through it."""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path


def fsync_file(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def fsync_directory(path: Path) -> None:
    fsync_file(path)  # a directory is fsynced through a read-only descriptor, as a file is


@contextmanager
def staged(output: Path):
    """A fresh hidden sibling of `output` to write into; moved into `output` once the body returns (as one rename
    when `output` is new or empty, else file by file with --overwrite, each file whole); removed on an error. A
    kill leaves only the sibling, which the next write of the same directory clears. Every file is fsynced before
    the move, and the move's directory after it, so a power cut leaves the old directory or the whole new one."""
    output = output.resolve()  # "." has no name to put beside it
    staging = output.with_name(f".{output.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        yield str(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    for path in sorted(staging.rglob("*"), key=lambda p: len(p.parts), reverse=True):  # files, then directories
        fsync_file(path)
    fsync_directory(staging)
    if output.is_dir() and not any(output.iterdir()):
        output.rmdir()
    if not output.exists():
        os.rename(staging, output)
        fsync_directory(output.parent)
        return
    for entry in staging.iterdir():  # --overwrite: each file written replaces its namesake whole; others stay
        os.replace(entry, output / entry.name)
    staging.rmdir()
    fsync_directory(output)

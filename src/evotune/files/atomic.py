"""Writing files so that a kill or a power cut at any instant leaves the old version or the whole new one:
fsync of files and directories, and `staged`, a hidden sibling directory moved into place once complete.
Checkpoints, exports and the vLLM engine's model export all write through it."""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path

from ..errors import OutputError


def refuse_link(path: Path, what: str = "") -> None:
    """Refuse a path that is a symbolic link: a write through it would change the folder it points to (a user's own
    files), and a removal would follow it. One line naming the link and its target."""
    if path.is_symlink():
        raise OutputError(f"{what or path} is a symbolic link (to {os.readlink(path)}); evotune never writes or "
                          "deletes through a link, so the folder it points to stays as it is: replace the link with "
                          "a real directory, or choose another output directory.")


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
    refuse_link(Path(output))
    output = Path(os.path.abspath(output))  # "." has no name to put beside it; a link above stays a link, not followed
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

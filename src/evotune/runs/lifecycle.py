"""One run lifecycle, shared by `evotune train`, `sft` and `grpo`: check, lock, create / resume / overwrite, write
config.yaml, run, stage the final model into place, give the lock back.

The steps are split so that building a run writes nothing: `inspect` only reads (is the directory writable, is
another process writing it, does what it holds agree with resume/overwrite), so a refusal comes before a model
loads and leaves every file as it was; `opened` is where the run starts to write: it takes the directory's lock,
inspects again under it (another process may have started a run meanwhile), clears an earlier run's files for
`overwrite` or an unstarted attempt's for a resume, and writes config.yaml; it gives the lock back when the block
ends, and removes a new run that failed before completing anything, so the same command simply runs again once
the cause is fixed. The refusals are worded once, for the command line and for Python callers alike.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError, OutputError
from ..files.atomic import fsync_file, refuse_link, staged
from ..files.checkpoint import find_checkpoint
from . import lock as run_lock

# What evotune writes into a run directory before the run's own files: ESTrainer's copy of its datasets (data/), and
# the lock (runs/lock.py); a folder holding only these is a run's.
MADE_BEFORE_THE_RUN = ("data", run_lock.LOCK_FILE)

BOTH_FLAGS = ("--resume continues a run and --overwrite replaces it; pass only one of them (resume=True or "
              "overwrite=True from Python).")


class RunLifecycle:
    """A run directory from its first check to its last write, for one command.

    artifacts: the names this command writes there (only these are ever removed: the directory's other files
    are the user's). inspect(lifecycle): the command's own read-only checks of what the directory holds against
    the request (resume keys, progress, ...); returns the checkpoint to resume from, or None for a new run, and
    may refuse. on_resume(lifecycle): what a resume clears before it writes (an unstarted attempt's files, a
    checkpoint a kill cut short).
    """

    def __init__(self, output_dir: str | Path, artifacts: tuple[str, ...], resume: bool = False,
                 overwrite: bool = False, inspect: Callable[[RunLifecycle], Path | None] | None = None,
                 on_resume: Callable[[RunLifecycle], None] | None = None, what: str = "a run"):
        if resume and overwrite:
            raise ConfigError(BOTH_FLAGS)
        self.given = output_dir  # as passed: an empty name must be refused, not read as "." by Path
        self.output_dir = Path(output_dir)
        self.artifacts = artifacts
        self.what = what  # how a refusal names what the directory holds ("a run", "an earlier run's")
        self.resume, self.overwrite = resume, overwrite
        self._inspect, self._on_resume = inspect, on_resume
        self.checkpoint: Path | None = None
        self.started = False  # opened once: later `opened` blocks (a second train()) only take the lock

    @property
    def new_run(self) -> bool:
        """Not a resume (a --resume with no checkpoint yet restarts from iteration 0 but stays a resume: a failure
        keeps its config.yaml, so the same --resume command runs it again)."""
        return not self.resume

    def found(self) -> list[str]:
        return [name for name in self.artifacts if (self.output_dir / name).exists()]

    def refuse_existing(self, resumable: bool | None) -> None:
        """A new run where one is: refused unless `overwrite` (resumable as existing_run_error takes it)."""
        found = self.found()
        if found and not self.overwrite and not self.resume:
            raise existing_run_error(self.output_dir, found, resumable, self.what)

    def inspect(self) -> Path | None:
        """Every check, reading only: the checkpoint to resume from (None: a new run)."""
        refuse_link(self.output_dir, f"output directory {self.output_dir}")
        for name in self.artifacts:  # final/, checkpoint/, config.yaml, ...: a write or removal would follow it
            refuse_link(self.output_dir / name)
        check_writable(self.given)
        if not run_lock.is_held(self.output_dir) and (record := run_lock.holder(self.output_dir)) is not None:
            raise run_lock.RunLockedError(run_lock.refusal(self.output_dir, record))
        self.refuse_foreign_files()
        if self._inspect is not None:
            self.checkpoint = self._inspect(self)
        else:  # no checks of its own: a new run where one is gets the common refusal
            self.refuse_existing(resumable=False)
        return self.checkpoint

    def refuse_foreign_files(self) -> None:
        """A new run (or --overwrite) into a folder holding files that no evotune run wrote (a user's own, such as
        /etc's) is refused, as `evotune export` refuses a folder that holds files: the run would write beside them.
        A resume writes only where its run is."""
        if self.resume or not self.output_dir.is_dir() or (self.output_dir / "config.yaml").is_file():
            return
        foreign = sorted(entry.name for entry in self.output_dir.iterdir() if entry.name not in self.artifacts
                         and entry.name not in MADE_BEFORE_THE_RUN and not entry.name.startswith(".evotune"))
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise ConfigError(f"{self.output_dir} holds files that are not an evotune run's ({shown}); a run writes "
                              "config.yaml, checkpoints and its model there, beside them. Choose a new or empty "
                              "--output-dir (output_dir).")

    def clear(self) -> None:
        """Remove what this command wrote there before (an --overwrite, or a resume's unstarted attempt)."""
        self._remove_found()

    def _remove_found(self, quiet: bool = False) -> None:
        """Remove every file and folder of this command's in the run directory, all or none: each is first renamed
        into one hidden folder beside them (a rename never follows a link), and a rename that fails moves the others
        back, so a failed removal leaves the run as it was; then that folder goes. `quiet`: leave what cannot be."""
        found = self.found()
        if not found:
            return
        trash = self.output_dir / f".evotune-removing-{os.getpid()}"
        moved: list[str] = []
        try:
            trash.mkdir()
            for name in found:
                os.rename(self.output_dir / name, trash / name)
                moved.append(name)
        except OSError:
            for name in moved:  # back where they were: the run is as it was
                with contextlib.suppress(OSError):
                    os.rename(trash / name, self.output_dir / name)
            with contextlib.suppress(OSError):
                trash.rmdir()
            if not quiet:
                raise
            return
        shutil.rmtree(trash, ignore_errors=True)  # out of the run already; a leftover hidden folder harms nothing

    @contextlib.contextmanager
    def opened(self, config: Any, iterations_done: Callable[[], int] = lambda: 0) -> Iterator[None]:
        """The run writes inside this block: its lock held, config.yaml written (first time only). A new run
        that fails before `iterations_done()` is above 0 leaves nothing behind."""
        made = [parent for parent in (self.output_dir, *self.output_dir.parents) if not parent.exists()]
        self.output_dir.mkdir(parents=True, exist_ok=True)
        run_lock.acquire(self.output_dir)
        try:
            if not self.started:
                self.inspect()  # again, under the lock: another process may have written here since
                if self.resume and self._on_resume:
                    self._on_resume(self)
                elif not self.resume:
                    self.clear()
                write_run_config(self.output_dir, config)
                self.started = True
            try:
                yield
            except BaseException:
                if self.new_run and iterations_done() == 0:
                    self.remove_unstarted()
                raise
        finally:
            run_lock.release(self.output_dir)
            if not self.started:  # nothing of the run is there: the directories this made go again
                for directory in made:  # innermost first; a directory holding anything stays
                    with contextlib.suppress(OSError):
                        directory.rmdir()

    def remove_unstarted(self) -> None:
        """What a failed new run wrote, unless it holds a checkpoint to resume."""
        if find_checkpoint(self.output_dir / "checkpoint"):
            return
        self._remove_found(quiet=True)  # what cannot be removed stays; the original error is the one to see
        self.started = False

    def staged(self, name: str = "final") -> contextlib.AbstractContextManager[str]:
        """A hidden sibling of OUTPUT_DIR/name to write the finished model into, moved into place whole once the
        block returns (files/atomic.py): a kill mid-write leaves the earlier final/ or none, never a torn one."""
        return staged(self.output_dir / name)


def check_writable(output_dir: str | Path, name: str | None = None) -> None:
    """Refuse an output directory the run could not write into (empty, under a file, read-only, /proc, a full
    disk, ...) before anything is loaded; directories made for the check are removed again. `name`: what the
    message calls it (default "output directory DIR"; check_writable_file names its flag and file)."""
    if not str(output_dir).strip():
        raise ConfigError("the output directory is empty; name the run directory, e.g. --output-dir runs/my_run.")
    output_dir = Path(output_dir)
    for parent in (output_dir, *output_dir.parents):
        # one stat per path, not exists() then is_dir(): `sweep --parallel` runs check at once, each removing the
        # parents it made, so a shared parent (the sweep's directory) can vanish between two looks, and a
        # directory seen existing and then gone is not a file (mkdir below makes it again)
        try:
            is_directory = stat.S_ISDIR(parent.stat().st_mode)
        except (FileNotFoundError, NotADirectoryError):  # missing, or under a file (found further up)
            continue
        if not is_directory:
            raise OutputError(f"{name or f'output directory {output_dir}'}: {parent} is a file, not a directory; "
                              "choose another path.")
        break
    made = [parent for parent in (output_dir, *output_dir.parents) if not parent.exists()]
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(dir=output_dir, prefix=".evotune-write-check-")
        try:  # one block, unbuffered: an empty file is created even on a full disk, and a buffer would fail at close
            os.write(handle, b"\0" * 4096)
            os.fsync(handle)
        finally:
            os.close(handle)
            os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"{name or f'output directory {output_dir}'} cannot be written ({exc.strerror or exc}); "
                          "choose a directory on a writable file system.") from exc
    finally:
        for directory in made:  # innermost first; nothing of the run is written before every check passed
            with contextlib.suppress(OSError):
                directory.rmdir()


def check_writable_file(path: Path, flag: str) -> None:
    """A result file's path (`flag` names it), checked as check_writable checks a directory, before the command's
    work: not a directory, its directory writable (read-only, under a file, /proc, a full disk), and an existing
    file writable. Its directory is made once the checks pass (and left as it was when they fail); the file itself
    is neither made nor changed."""
    if path.is_dir():
        raise ConfigError(f"{flag} {path} is a directory; give a file path.")
    check_writable(path.parent if str(path.parent) else Path("."), name=f"{flag} {path}")
    path.parent.mkdir(parents=True, exist_ok=True)  # checked writable: the result goes there at the end
    if path.exists():
        try:
            with path.open("a"):  # appends nothing: the file keeps its content until the result replaces it
                pass
        except OSError as exc:  # /sys, /proc, no permission
            raise OutputError(f"{flag} {path} cannot be written ({exc.strerror or exc}); choose another path.") \
                from exc


def existing_run_error(output_dir: Path, found: list[str], resumable: bool | None, what: str = "a run") -> ConfigError:
    """The refusal to start a new run where one is (train, sft and grpo alike), worded for the command line and for
    Python callers (Trainer, run_sft, run_grpo take resume= and overwrite=). resumable None: the run has no
    complete checkpoint to continue, which the message says."""
    if resumable:
        resume = " pass --resume to continue it (resume=True from Python),"
    elif resumable is None:
        resume = " it has no complete checkpoint, so --resume cannot continue it:"
    else:
        resume = ""
    listed = f"{what} {', '.join(found)}" if what.endswith("'s") else f"{what} ({', '.join(found)})"
    return ConfigError(f"{output_dir} already holds {listed}:{resume} pass --overwrite to replace it "
                       "(overwrite=True), or choose a new --output-dir (output_dir).")


def write_run_config(output_dir: Path, config: Any) -> None:
    """config.yaml written beside, then renamed over the old one: every resume rewrites it, and a kill mid-write
    must not leave a torn file, the only record of the run's settings (a mapping cut short would resume on
    defaults for the keys it lost)."""
    partial = output_dir / ".config.yaml.partial"
    values = config.to_dict() if hasattr(config, "to_dict") else dict(config)  # a config, or a mapping
    partial.write_text(yaml.safe_dump(values, sort_keys=False))
    fsync_file(partial)
    os.replace(partial, output_dir / "config.yaml")


@contextlib.contextmanager
def locked_for_start(output_dir: Path) -> Iterator[None]:
    """Take `output_dir`'s lock (making the directory) before a run changes anything in it; kept when the block
    succeeds, given back when it fails, and then the directories this made are removed again if empty."""
    made = [parent for parent in (output_dir, *output_dir.parents) if not parent.exists()]
    output_dir.mkdir(parents=True, exist_ok=True)
    run_lock.acquire(output_dir)
    try:
        yield
    except BaseException:
        run_lock.release(output_dir)
        for directory in made:  # innermost first
            with contextlib.suppress(OSError):
                directory.rmdir()
        raise


@contextlib.contextmanager
def writing(output_dir: str | Path) -> Iterator[None]:
    """Hold `output_dir`'s lock for a whole command (sft, grpo, sweep); given back when the command ends."""
    output_dir = Path(output_dir)
    made = [parent for parent in (output_dir, *output_dir.parents) if not parent.exists()]
    with locked_for_start(output_dir):
        pass
    try:
        yield
    finally:
        run_lock.release(output_dir)
        for directory in made:  # a command that failed before writing anything leaves no directory behind
            with contextlib.suppress(OSError):
                directory.rmdir()

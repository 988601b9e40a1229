"""Resumable run state: small JSON + the exact fp32 mean, written so that a kill at any instant
leaves a complete checkpoint, and read only after its checksums match.

A checkpoint holds the space's mean (fp32 master tensors), the strategy and optimizer
state, and the update log: per iteration the (seeds, coefficients) that produced it,
so the weights can also be rebuilt from the base model by replay (ES state is small).

Layout next to each other: `checkpoint/` (the latest), `checkpoint.old/` (the one before: the
fallback) and, while a save runs, `checkpoint.tmp/`. A save writes and fsyncs every file into
checkpoint.tmp, then writes manifest.json (each file's size and sha256) last, and only then
rotates with two atomic renames: checkpoint -> checkpoint.old, checkpoint.tmp -> checkpoint.
So at every instant checkpoint/ or checkpoint.old/ is complete, and a save killed anywhere is
cleaned up by the next one. Loading checks the manifest; when checkpoint/ is damaged,
`find_checkpoint` falls back to checkpoint.old/ and says so in a warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safetensors import SafetensorError

from ..errors import CheckpointError
from .atomic import fsync_directory, fsync_file, staged  # noqa: F401 - staged: re-exported for old callers

if TYPE_CHECKING:  # torch loads with the first tensor written or read: reading a run's JSON needs none of it
    import torch

STATE_FILE = "state.json"
MANIFEST_FILE = "manifest.json"
REQUIRED_FILES = (STATE_FILE, "space.safetensors", "updates.json")
MANIFEST_FORMAT = 1

# Fault injection: each hook is called with the name of the filesystem step a save is about to
# take. Tests append one that raises (in process) or SIGKILLs the process (in a child) at the k-th
# step, for every k, to show that a kill anywhere leaves a resumable run directory.
FAULT_HOOKS: list[Callable[[str], None]] = []

# The last verified state of each checkpoint directory: its files' (name, size, mtime, inode). A resume
# verifies once in find_checkpoint; load_checkpoint and the next save then do not hash a model again.
_VERIFIED: dict[str, tuple] = {}


class CheckpointFallbackWarning(UserWarning):
    """The newest checkpoint is damaged and an older one is used instead."""


def _step(name: str) -> None:
    for hook in FAULT_HOOKS:
        hook(name)


def _sibling(directory: Path, suffix: str) -> Path:
    return directory.with_name(directory.name + suffix)


def _contiguous(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().contiguous().cpu() for name, tensor in tensors.items()}


# ---------------------------------------------------------------------------------------------
# Writing


def save_checkpoint(directory: Path, state: dict[str, Any], space_tensors: dict[str, torch.Tensor],
                    optimizer_tensors: dict[str, torch.Tensor], update_log: list[dict],
                    keep_previous: bool = True) -> None:
    """Write a complete, checksummed checkpoint to `directory`, keeping the previous one as
    `directory`.old (the fallback if the newest is ever damaged) unless keep_previous is False."""
    directory = Path(directory)
    staging, previous = _sibling(directory, ".tmp"), _sibling(directory, ".old")
    _remove_tree(staging)  # left by a save that was killed before its swap
    files = _write_staging(staging, state, space_tensors, optimizer_tensors, update_log)
    if directory.exists() and verify_checkpoint(directory) is None:  # a hash only if changed since written
        _remove_tree(previous)
        _rename(directory, previous)
    else:
        # Missing (a save was killed between its two renames) or damaged: checkpoint.old, when
        # present, is the intact one and stays the fallback; a damaged one must not replace it.
        _remove_tree(directory)
    _rename(staging, directory)
    _VERIFIED[str(directory.resolve())] = _signature(directory, files)  # hashed from disk just now
    if not keep_previous:
        _remove_tree(previous)


def _write_staging(staging: Path, state: dict[str, Any], space_tensors: dict[str, torch.Tensor],
                   optimizer_tensors: dict[str, torch.Tensor], update_log: list[dict]) -> dict[str, dict]:
    """Every file, fsynced, then manifest.json last: a directory with a manifest is complete.
    Returns the manifest's file entries."""
    from safetensors.torch import save_file

    _step(f"mkdir {staging.name}")
    staging.mkdir(parents=True)
    _step("write space.safetensors")
    save_file(_contiguous(space_tensors), str(staging / "space.safetensors"))
    if optimizer_tensors:
        _step("write optimizer.safetensors")
        save_file(_contiguous(optimizer_tensors), str(staging / "optimizer.safetensors"))
    _write_text(staging / "updates.json", json.dumps(update_log))
    _write_text(staging / STATE_FILE, json.dumps(state, indent=2))
    files = sorted(path.name for path in staging.iterdir())
    for name in files:
        _step(f"fsync {name}")
        fsync_file(staging / name)
    manifest = {"format": MANIFEST_FORMAT,
                "files": {name: {"size": (staging / name).stat().st_size, "sha256": _sha256(staging / name)}
                          for name in files}}
    _write_text(staging / MANIFEST_FILE, json.dumps(manifest, indent=2))
    fsync_file(staging / MANIFEST_FILE)
    fsync_directory(staging)
    return manifest["files"]


def _write_text(path: Path, text: str) -> None:
    _step(f"write {path.name}")
    path.write_text(text)


def _rename(source: Path, target: Path) -> None:
    _step(f"rename {source.name} -> {target.name}")
    os.rename(source, target)
    fsync_directory(target.parent)  # the rename itself survives a power cut only once its directory is synced


def _remove_tree(path: Path) -> None:
    """Delete a checkpoint directory one file at a time, state.json first: a directory whose
    deletion was interrupted is then never mistaken for a checkpoint."""
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_dir():
        _step(f"delete {path.name}")
        path.unlink()
        return
    names = sorted(entry.name for entry in path.iterdir())
    for name in sorted(names, key=lambda name: name != STATE_FILE):
        _step(f"delete {path.name}/{name}")
        entry = path / name
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    _step(f"rmdir {path.name}")
    path.rmdir()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------
# Checking


def verify_checkpoint(directory: Path) -> str | None:
    """None when `directory` is a complete checkpoint whose files match their checksums, else what is wrong."""
    directory = Path(directory)
    if not directory.is_dir():
        return "it is not a directory"
    if not (directory / MANIFEST_FILE).exists():
        return _verify_without_manifest(directory)
    try:
        manifest = json.loads((directory / MANIFEST_FILE).read_text())
        files = manifest["files"]
        assert isinstance(files, dict) and all(isinstance(entry, dict) for entry in files.values())
    except (OSError, ValueError, KeyError, TypeError, AssertionError):
        return f"{MANIFEST_FILE} is unreadable"
    missing = [name for name in REQUIRED_FILES if name not in files]
    if missing:
        return f"{MANIFEST_FILE} does not list {', '.join(missing)}"
    key, signature = str(directory.resolve()), _signature(directory, files)
    if signature and _VERIFIED.get(key) == signature:
        return None
    for name, entry in files.items():
        problem = _check_file(directory, name, entry)
        if problem:
            return problem
    _VERIFIED[key] = signature
    return None


def _check_file(directory: Path, name: str, entry: dict) -> str | None:
    if Path(name).name != name:
        return f"{MANIFEST_FILE} names a file outside the checkpoint ({name!r})"
    path = directory / name
    if not path.is_file():
        return f"{name} is missing"
    size = path.stat().st_size
    if size != entry.get("size"):
        return f"{name} has {size} bytes where {entry.get('size')} were written (truncated or overwritten)"
    if _sha256(path) != entry.get("sha256"):
        return f"{name} does not match its sha256 checksum (it was changed after the checkpoint was written)"
    return None


def _signature(directory: Path, files: dict) -> tuple:
    stats = []
    for name in sorted(files):
        try:
            stat = (directory / name).stat()
        except OSError:
            return ()
        stats.append((name, stat.st_size, stat.st_mtime_ns, stat.st_ino))
    return tuple(stats)


def _verify_without_manifest(directory: Path) -> str | None:
    """Checkpoints written before manifests existed: complete when every file is there and parses."""
    missing = [name for name in REQUIRED_FILES if not (directory / name).is_file()]
    if missing:
        return f"{', '.join(missing)} and {MANIFEST_FILE} missing"
    try:
        _read(directory)
    except CheckpointError as exc:
        return str(exc)
    return None


def find_checkpoint(directory: Path, consequence: str = "the iterations after it are run again") -> Path | None:
    """The newest complete checkpoint: `directory`, else `directory`.old (with a warning saying why, and
    `consequence`: what the caller does with the older one), else None. A directory that fails its checksum is
    never returned."""
    directory = Path(directory)
    problems = []
    for candidate in (directory, _sibling(directory, ".old")):
        if not candidate.exists():
            continue
        problem = verify_checkpoint(candidate)
        if problem is None:
            if problems:
                warnings.warn(CheckpointFallbackWarning(
                    f"{'; '.join(problems)}. Using the previous checkpoint {candidate} (iteration "
                    f"{load_state(candidate)['iteration']}) instead; {consequence}."),
                    stacklevel=2)
            return candidate
        problems.append(f"checkpoint {candidate} is damaged: {problem}")
    if problems:
        warnings.warn(CheckpointFallbackWarning(f"{'; '.join(problems)}. No intact checkpoint is left; the run "
                                                "cannot be resumed."), stacklevel=2)
    return None


# ---------------------------------------------------------------------------------------------
# Reading


def load_state(directory: Path) -> dict[str, Any]:
    """The checkpoint's small JSON state alone (iteration, strategy state), without the tensors."""
    path = Path(directory) / STATE_FILE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise CheckpointError(f"{path} is unreadable ({exc}); {_FIX}") from exc
    _check_state(state, path)
    return state


def load_checkpoint(directory: Path, verify: bool = True) -> dict[str, Any]:
    """State, tensors and update log of the checkpoint in `directory`, after checking its checksums."""
    directory = Path(directory)
    problem = verify_checkpoint(directory) if verify else None
    if problem:
        raise CheckpointError(f"checkpoint {directory} is damaged: {problem}; {_FIX}")
    return _read(directory)


_FIX = ("resuming uses the previous checkpoint (checkpoint.old) when it is intact; otherwise start the run "
        "again with --overwrite")


def problem_of(error: CheckpointError) -> str:
    """A read error's own cause, without the resume advice appended to it (advice that is wrong for a reader that
    is not resuming, e.g. export, whose run may be healthy and still being written)."""
    return str(error).removesuffix(f"; {_FIX}")


def _read(directory: Path) -> dict[str, Any]:
    optimizer_path = directory / "optimizer.safetensors"
    return {
        "state": load_state(directory),
        "space_tensors": _load_tensors(directory / "space.safetensors"),
        "optimizer_tensors": _load_tensors(optimizer_path) if optimizer_path.exists() else {},
        "update_log": _load_update_log(directory / "updates.json"),
    }


def _load_tensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        from safetensors.torch import load_file

        return load_file(str(path))
    except (OSError, SafetensorError) as exc:
        raise CheckpointError(f"{path} is not a readable safetensors file ({exc}); {_FIX}") from exc


def _load_update_log(path: Path) -> list[dict]:
    try:
        log = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path} is unreadable ({exc}); {_FIX}") from exc
    if not isinstance(log, list) or not all(isinstance(e, dict) and isinstance(e.get("iteration"), int) for e in log):
        raise CheckpointError(f"{path} is not an update log (a list of {{\"iteration\": ...}} objects); {_FIX}")
    return log


def _check_state(state: Any, path: Path) -> None:
    """The keys every resume reads: a top-level iteration and the strategy's own state."""
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} holds a {type(state).__name__}, not evotune's state object; {_FIX}")
    missing = [key for key in ("iteration", "strategy") if key not in state]
    if not missing and not (isinstance(state["strategy"], dict) and "iteration" in state["strategy"]):
        missing = ["strategy.iteration"]
    if missing:
        raise CheckpointError(f"{path} lacks the key(s) {', '.join(missing)}; {_FIX}")
    if not isinstance(state["iteration"], int) or isinstance(state["iteration"], bool):
        raise CheckpointError(f"{path}: `iteration` is {state['iteration']!r}, not a whole number; {_FIX}")

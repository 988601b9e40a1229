"""The run directory: what a run writes, when it may be written, and what a resume may change.

A run directory describes one run. Starting a run never overwrites another one's files unless
asked (`overwrite`), and resuming reads the run's own config.yaml: only keys that cannot change
the trajectory of the mean may differ (how long to run, how often to evaluate, checkpoint and log,
and where the population is evaluated, which gives the same rewards bit for bit). A run stopped before
its first checkpoint resumes from iteration 0 (nothing it computed was saved); a damaged checkpoint is
never started over.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from ..config.files import absolutize_paths
from ..config.train import TrainConfig
from ..errors import ConfigError, OutputError
from ..files.atomic import fsync_file
from ..files.checkpoint import find_checkpoint, load_state
from . import lock as run_lock

# What `evotune train` writes into a run directory (files and directories).
RUN_ARTIFACTS = ("config.yaml", "metrics.jsonl", "checkpoint", "checkpoint.old", "checkpoint.tmp", "final",
                 "tensorboard", "curves.png", "samples.jsonl", "loggers.json")
# The last section of the model card (evaluation/model_card.py), the last file a finished run writes into final/ (PEFT
# writes a template README.md of its own earlier, without it): its presence marks a whole final/.
MODEL_CARD_MARK = "## Reproduce"
# Keys a resumed run may change: none of them moves the mean differently (prefetch_candidates writes the same
# bits, only earlier).
RESUMABLE_KEYS = ("iterations", "max_training_seconds", "eval_every", "eval_max_new_tokens", "checkpoint_every",
                  "report_to", "log_samples", "distributed", "workers", "ray_address", "prompt_shards",
                  "straggler_factor", "checksum_every", "worker_num_cpus", "worker_num_gpus", "engine_core",
                  "tensor_parallel_size", "gpu_memory_utilization", "retention_tasks", "retention_num_eval",
                  "retention_kl", "prefetch_candidates", "ray_timeout")


def read_run_config(output_dir: Path) -> dict[str, Any]:
    """The raw values of a run's config.yaml (the resolved config it was started with)."""
    path = Path(output_dir) / "config.yaml"
    if not path.exists():
        raise ConfigError(f"--resume: {path} does not exist, so {output_dir} is not an evotune run directory; "
                          "start a new run without --resume.")
    try:
        values = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--resume: {path} is not valid YAML ({exc}); it was damaged after the run wrote "
                          "it.") from exc
    if not isinstance(values, dict):
        raise ConfigError(f"--resume: {path} does not hold a mapping of config keys; it was damaged.")
    return values


def changed_keys(run: TrainConfig, requested: TrainConfig) -> list[str]:
    """Keys whose values differ between the run's config and the requested one (a requested `dtype: auto`
    means the run's own resolved dtype)."""
    started, now = run.to_dict(), requested.to_dict()
    return [key for key in now if now[key] != started.get(key) and not (key == "dtype" and now[key] == "auto")]


def check_resume(output_dir: Path, config: Any, resumable: tuple[str, ...] = RESUMABLE_KEYS,
                 command: str = "train") -> None:
    """Refuse a resume whose config changes a key that would change the run (only `resumable` keys may):
    `evotune train`'s TrainConfig, or `evotune sft`'s config with its own keys and command."""
    path = Path(output_dir) / "config.yaml"
    run = type(config).from_dict(read_run_config(output_dir), source=str(path))
    absolutize_paths(run)  # a run recorded before paths were stored absolute: relative to this directory
    forbidden = [key for key in changed_keys(run, config) if key not in resumable]
    if forbidden:
        details = "; ".join(f"`{key}` {getattr(run, key)!r} -> {getattr(config, key)!r}" for key in forbidden)
        raise ConfigError(f"--resume keeps the run's own config ({path}), but this one changes {details}. Resume "
                          f"with `evotune {command} --output-dir {output_dir} --resume` (only "
                          f"{', '.join(resumable)} may be changed with --set), or start a new run in another "
                          "--output-dir.")


def final_is_complete(final: Path, command: str = "train") -> bool:
    """final/ as a finished run leaves it. A run writes the weights, then the tokenizer, then (train) the model
    card, whose last section is written last, so the last of them present means the ones before are whole; a
    kill leaves an earlier state."""
    if not (Path(final) / "tokenizer_config.json").is_file():
        return False
    if command == "grpo":
        return True
    card = Path(final) / "README.md"
    return card.is_file() and MODEL_CARD_MARK in card.read_text(encoding="utf-8", errors="replace")


def check_progress(output_dir: Path, config: TrainConfig, state: dict[str, Any]) -> None:
    """Refuse a resume that would shorten the run's record, or that has nothing left to do and would say nothing:
    `iterations` below the checkpoint's, or a spent `max_training_seconds` with final/ already written."""
    done, spent = state["iteration"], float(state.get("training_seconds", 0.0))
    if config.iterations < done:
        raise ConfigError(f"--resume: the run in {output_dir} has done {done} iterations, so `iterations` "
                          f"{config.iterations} would end it before where it is; set iterations to {done} or more "
                          "(config.yaml keeps the run's own value).")
    budget = config.max_training_seconds
    if budget and spent >= budget and done < config.iterations and final_is_complete(output_dir / "final"):
        raise ConfigError(f"--resume: the run in {output_dir} already spent its max_training_seconds ({spent:.0f} "
                          f"of {budget:g} s) and wrote final/, so there is nothing to continue; raise it, e.g. --set "
                          f"max_training_seconds={2 * budget:g} (or 0 for no limit).")


def check_restartable(output_dir: Path) -> None:
    """--resume of a directory without an intact checkpoint starts the run again from iteration 0, which loses
    nothing only if no checkpoint was ever written (a damaged one may hold the only copy of its iterations) and
    no finished final/ is there (a checkpoint moved away from a finished run)."""
    if any((output_dir / name).exists() for name in ("checkpoint", "checkpoint.old")):
        raise ConfigError(f"--resume: every checkpoint in {output_dir} is damaged (see the warning above); "
                          "the run cannot be resumed. Start it again with --overwrite, or choose a new "
                          "--output-dir.")
    if final_is_complete(output_dir / "final"):
        raise ConfigError(f"--resume: {output_dir} holds a finished final/ but no checkpoint/ (it was moved or "
                          "deleted), so the run cannot continue from where it ended. Put checkpoint/ back, or start "
                          "a new run in another --output-dir (--overwrite replaces this one).")


def restart_unstarted(output_dir: Path) -> None:
    """--resume of a run stopped before its first checkpoint: nothing it computed was saved, so it starts from
    iteration 0 with its own config.yaml, as the uninterrupted run did, and ends on the same weights. The files
    of the stopped attempt (metrics, samples, TensorBoard events, a half-written checkpoint.tmp) go first: the
    restarted run writes each again, and would otherwise log its iterations twice."""
    logged = _logged_iterations(output_dir / "metrics.jsonl")
    for name in existing_artifacts(output_dir):
        if name != "config.yaml":
            path = output_dir / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    again = f"; the {logged} iteration(s) it logged are run again" if logged else ""
    print(f"evotune: note: {output_dir} has no checkpoint yet (the run stopped before its first one), so --resume "
          f"starts it from iteration 0 with its config.yaml{again}.", file=sys.stderr, flush=True)


def _logged_iterations(path: Path) -> int:
    """How many training iterations a metrics.jsonl records (a line torn by a kill is not one)."""
    if not path.is_file():
        return 0
    count = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            count += isinstance(record, dict) and "samples_seen" in record
    return count


def existing_artifacts(output_dir: Path) -> list[str]:
    return [name for name in RUN_ARTIFACTS if (Path(output_dir) / name).exists()]


@contextlib.contextmanager
def writes_reported(output_dir: Path) -> Iterator[None]:
    """Around a run's training: a file the run cannot write (disk full, a read-only remount) stops it with an
    OutputError naming the cause; checkpoints are written whole or not at all, so the newest complete one is
    still there to resume from (the CLI prints the resume command)."""
    from safetensors import SafetensorError

    try:
        yield
    except (OSError, SafetensorError) as exc:
        if isinstance(exc, FileNotFoundError) and not (Path(output_dir) / "config.yaml").exists():
            raise OutputError(f"the run's files in {output_dir} vanished while it ran ({exc.filename or exc}: "
                              "config.yaml is gone too): another process deleted or replaced them. Nothing of "
                              "this run was kept there; start it again.") from exc
        raise OutputError(f"the run could not write its files in {output_dir} ({type(exc).__name__}: {exc}); the "
                          "newest complete checkpoint is intact. Free disk space or make the directory writable, "
                          "then resume.") from exc


def check_writable(output_dir: str | Path) -> None:
    """Refuse an output directory the run could not write into (empty, under a file, read-only, /proc, ...)
    before anything is loaded; directories made for the check are removed again."""
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
            raise OutputError(f"output directory {output_dir}: {parent} is a file, not a directory; choose another "
                              "path.")
        break
    made = [parent for parent in (output_dir, *output_dir.parents) if not parent.exists()]
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=output_dir, prefix=".evotune-write-check-"):
            pass
    except OSError as exc:
        raise OutputError(f"output directory {output_dir} cannot be written ({exc.strerror or exc}); choose a "
                          "directory on a writable file system.") from exc
    finally:
        for directory in made:  # innermost first; nothing of the run is written before every check passed
            with contextlib.suppress(OSError):
                directory.rmdir()


@contextlib.contextmanager
def removed_if_start_fails(output_dir: Path, new_run: bool, created: bool = False) -> Iterator[None]:
    """Around the start of a new run: if building it fails (bad data, a model that does not load, a prompt
    too long), remove what this attempt wrote (config.yaml, loggers' files), so the same command can simply
    be run again once the input is fixed, instead of being refused as "already holds a run". A resumed run's
    files are the run's record and stay."""
    try:
        yield
    except BaseException:
        if new_run:
            remove_unstarted_run(output_dir, created)
        raise


@contextlib.contextmanager
def removed_if_no_iteration_done(output_dir: Path, new_run: bool, iterations_done: Callable[[], int],
                                 created: bool = False) -> Iterator[None]:
    """Around a new run's loop: a failure before its first iteration completed (a reward function that raises on
    the starting evaluation or the first population) leaves a config.yaml and an empty log, a run in name only;
    they are removed as a failed start's are, so the same command simply runs again once the cause is fixed. A
    failure after that keeps the run's record (its metrics say how far it got)."""
    try:
        yield
    except BaseException:
        if new_run and iterations_done() == 0:
            remove_unstarted_run(output_dir, created)
        raise


def remove_unstarted_run(output_dir: Path, created: bool = False) -> None:
    """What a run writes (RUN_ARTIFACTS, never the user's other files), unless it holds a checkpoint to resume;
    `created`: the run made output_dir, which goes too when nothing else is in it."""
    if find_checkpoint(Path(output_dir) / "checkpoint"):
        return
    for name in existing_artifacts(output_dir):
        path = Path(output_dir) / name
        with contextlib.suppress(OSError):  # what cannot be removed stays; the original error is the one to see
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    if created:
        run_lock.release(output_dir)  # its lock file would keep the directory from being empty
        with contextlib.suppress(OSError):  # not empty: someone else's files are in it
            Path(output_dir).rmdir()


def prepare(output_dir: str | Path, config: TrainConfig, resume: bool, overwrite: bool) -> Path | None:
    """Check the directory against the request, write config.yaml, and return the checkpoint to
    resume from (None for a new run). Nothing is written before every check has passed, except the run
    directory's lock (runs/lock.py), taken first: on success the caller holds it and gives it back with
    `lock.release(output_dir)` when the run ends."""
    check_writable(output_dir)
    output_dir = Path(output_dir)
    with locked_for_start(output_dir):
        return _prepare(output_dir, config, resume, overwrite)


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


def _prepare(output_dir: Path, config: TrainConfig, resume: bool, overwrite: bool) -> Path | None:
    absolutize_paths(config)
    checkpoint = find_checkpoint(output_dir / "checkpoint")
    if resume:
        if overwrite:
            raise ConfigError("--resume continues a run and --overwrite replaces it; pass only one of them.")
        if checkpoint is None:
            check_restartable(output_dir)
        check_resume(output_dir, config)
        if checkpoint is None:
            restart_unstarted(output_dir)
        else:
            check_progress(output_dir, config, load_state(checkpoint))
        # the dtype the run started with, not what `auto` would pick on this machine: resume stays exact
        config.dtype = read_run_config(output_dir).get("dtype", config.dtype)
    else:
        found = existing_artifacts(output_dir)
        if found and not overwrite:
            # a run stopped before its first checkpoint resumes too (from iteration 0, see restart_unstarted)
            raise existing_run_error(output_dir, found, resumable=bool(checkpoint or "config.yaml" in found))
        for name in found:  # only what a run writes; other files in the directory are the user's
            path = output_dir / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        checkpoint = None
    if config.dtype == "auto":  # config.yaml records the machine's choice, so a resume elsewhere keeps it
        from ..backends.base import resolve_device
        from ..backends.models import resolve_dtype

        config.dtype = resolve_dtype("auto", resolve_device(config.device))
    output_dir.mkdir(parents=True, exist_ok=True)
    write_run_config(output_dir, config)
    return checkpoint


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


def write_run_config(output_dir: Path, config: TrainConfig) -> None:
    """config.yaml written beside, then renamed over the old one: every resume rewrites it, and a kill mid-write
    must not leave a torn file, the only record of the run's settings (a mapping cut short would resume on
    defaults for the keys it lost)."""
    partial = output_dir / ".config.yaml.partial"
    partial.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
    fsync_file(partial)
    os.replace(partial, output_dir / "config.yaml")

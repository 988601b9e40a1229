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
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from ..config.checks import resolve_device
from ..config.files import absolutize_paths
from ..config.train import TrainConfig
from ..errors import ConfigError, OutputError
from ..files.checkpoint import find_checkpoint, load_state
from . import lock as run_lock
from .lifecycle import (  # noqa: F401 (check_writable, existing_run_error, writing: their earlier home)
    RunLifecycle,
    check_writable,
    existing_run_error,
    write_run_config,
    writing,
)

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


def read_run_config(output_dir: Path, flag: str = "--resume") -> dict[str, Any]:
    """The raw values of a run's config.yaml (the resolved config it was started with); flag: what asks for it, named
    in the errors (--resume, or `evotune eval RUN_DIR`)."""
    path = Path(output_dir) / "config.yaml"
    if not path.exists():
        left = [name for name in existing_artifacts(Path(output_dir)) if name != "config.yaml"]
        if left and flag == "--resume":  # one way forward each: the record back, or the run replaced
            raise ConfigError(f"--resume: {path} is gone, though {output_dir} holds a run's {', '.join(left)}: put "
                              "back the config.yaml the run wrote to resume it, or start it again over them with "
                              "--overwrite (without --resume).")
        if flag == "--resume":
            raise ConfigError(f"--resume: {path} does not exist, so {output_dir} is not an evotune run directory; "
                              "start a new run without --resume.")
        raise ConfigError(f"{flag}: {path} does not exist, so {output_dir} is not an evotune run directory; give a "
                          "run's directory, or score a model with --model MODEL --task TASK.")
    try:
        values = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{flag}: {path} is not valid YAML ({exc}); it was damaged after the run wrote "
                          "it.") from exc
    if not isinstance(values, dict):
        raise ConfigError(f"{flag}: {path} does not hold a mapping of config keys; it was damaged.")
    return values


# Keys only one command's config.yaml holds: which command wrote a run (for a resume by another command).
COMMAND_KEYS = {"grpo": "num_generations", "sft": "num_train", "train": "population_size"}


def run_command(values: dict[str, Any]) -> str | None:
    """The command whose run a config.yaml's values are (train, grpo or sft), or None when none of their keys is
    there."""
    return next((command for command, key in COMMAND_KEYS.items() if key in values), None)


def refuse_other_commands_run(values: dict[str, Any], output_dir: Path, command: str) -> None:
    """A resume by `command` of a run another command wrote: one line naming the command that resumes it."""
    wrote = run_command(values)
    if wrote is not None and wrote != command:
        raise ConfigError(f"--resume: {output_dir} is an `evotune {wrote}` run, not an `evotune {command}` run: "
                          f"resume it with `evotune {wrote} --output-dir {output_dir} --resume`.")


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


def inspect_train_run(run: RunLifecycle, config: TrainConfig) -> Path | None:
    """`evotune train`'s checks of its directory (RunLifecycle's inspect; reads only): the checkpoint to resume from,
    or None for a new run. Resolves `config` as the run will record it: paths absolute, and the dtype the run
    started with (a resume stays exact) or this machine's choice for `auto`."""
    output_dir = run.output_dir
    absolutize_paths(config)
    checkpoint = find_checkpoint(output_dir / "checkpoint")
    if run.resume:
        if checkpoint is None:
            check_restartable(output_dir)
        check_resume(output_dir, config)
        if checkpoint is not None:
            check_progress(output_dir, config, load_state(checkpoint))
        config.dtype = read_run_config(output_dir).get("dtype", config.dtype)
    else:
        # a run stopped before its first checkpoint resumes too (from iteration 0, see restart_unstarted)
        run.refuse_existing(resumable=bool(checkpoint or "config.yaml" in run.found()))
        checkpoint = None
    if config.dtype == "auto":  # config.yaml records the machine's choice, so a resume elsewhere keeps it
        from ..backends.models import resolve_dtype

        config.dtype = resolve_dtype("auto", resolve_device(config.device))
    return checkpoint


def train_run(output_dir: str | Path, config: TrainConfig, resume: bool = False,
              overwrite: bool = False) -> RunLifecycle:
    """The lifecycle of an `evotune train` run directory (nothing written until its `opened` block)."""
    return RunLifecycle(output_dir, RUN_ARTIFACTS, resume, overwrite,
                        inspect=lambda run: inspect_train_run(run, config),
                        on_resume=lambda run: run.checkpoint is None and restart_unstarted(run.output_dir))


def prepare(output_dir: str | Path, config: TrainConfig, resume: bool, overwrite: bool) -> Path | None:
    """Start a train run in one call (what a kill right after the start leaves, for tests): check, lock, write
    config.yaml; returns the checkpoint to resume from. The lock stays held: give it back with
    `lock.release(output_dir)`."""
    run = train_run(output_dir, config, resume, overwrite)
    checkpoint = run.inspect()
    with run.opened(config):
        run_lock.acquire(run.output_dir)  # one more hold, kept past the block
    return checkpoint

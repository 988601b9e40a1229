"""The average of an `evotune train` run's last iterates (tail averaging; Polyak and Juditsky 1992, "Acceleration
of stochastic approximation by averaging"), rebuilt from the run's update log: `evotune export --average-last K`.

Why: an ES update is a noisy estimate of the gradient (a small population, a small batch of prompts), so the mean
keeps moving about the region a run has reached, and the last iterate is one draw of that motion. The average of
the last K iterates smooths part of that noise away without training again (the replay below costs about what
the run's own updates cost, no generation).

How, without keeping copies while training: every update is logged (its seeds and coefficients, a few hundred
bytes an iteration, checkpoint/updates.json), so the run is replayed from its start, the same noise regenerated
and the same optimizer state (anchor included) rebuilt, and the last K means are summed on the way
(their offsets from the final mean, in one fp32 copy of the trained weights, beside the checkpoint's mean that
checks the replay: two fp32 copies; for lora / svd_lora, copies of the adapter's small vector). The replay must
end on the checkpoint's mean bit for bit; one that does not (another device's generator, an edited run) is
refused, not averaged.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from ..config.checks import resolve_device
from ..config.train import TrainConfig, load_config
from ..errors import CheckpointError, ConfigError
from ..files.checkpoint import load_checkpoint, load_state, problem_of, verify_checkpoint
from ..spaces.base import differing_tensors
from ..types import update_from_dict

# A train running in the run renames a new checkpoint/ into place at every save: a read that overlaps one is
# retried this many times, this far apart, before it is reported as a run being written.
READ_ATTEMPTS = 5
RETRY_SECONDS = 1.0


def average_last_iterates(run: Path, count: int) -> tuple[Any, dict]:
    """(backend whose model holds the mean of the run's last `count` iterates, summary). The run's checkpoint/
    must hold its last iteration (a finished run's does)."""
    from ..builders import build_space, load_backend

    require_run_directory(run)
    saved = read_newest_checkpoint(run)
    updates, iteration = saved["update_log"], int(saved["state"]["iteration"])
    if any(entry.get("kind") == "mean" for entry in updates):
        raise ConfigError(f"{run} is a CMA-ES run (strategy: cma): its log keeps only the newest mean (a mean "
                          "update is absolute), so its earlier iterates cannot be rebuilt; --average-last works on "
                          "OpenES runs, whose log keeps every update.")
    if len(updates) != iteration:
        raise CheckpointError(f"{run / 'checkpoint'} logs {len(updates)} updates for {iteration} iterations; the "
                              "run's iterates cannot be rebuilt from it.")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= iteration:
        raise ConfigError(f"--average-last is {count!r}, but the run's checkpoint holds {iteration} iterations; "
                          f"choose a number of last iterates from 1 to {iteration}.")
    config = replay_config(load_config(run / "config.yaml"))
    # the run's own device: gaussian noise comes from the device's generator (spaces/noise.py)
    backend = load_backend(config, resolve_device(config.device))
    space = build_space(config, backend)
    space.replay(updates[:iteration - count])
    final = saved["space_tensors"]
    # sum of (iterate - final mean), fp32: a tensor the search does not move (svd_lora's frozen bases) adds exact
    # zeros and keeps its value, and K = 1 gives the final mean itself
    offsets = {name: torch.zeros_like(tensor, dtype=torch.float32) for name, tensor in final.items()}
    for entry in updates[iteration - count:]:
        space.apply_update(update_from_dict(entry))
        for name, tensor in space.state_tensors().items():
            if name in offsets:
                offsets[name] += tensor.cpu().to(torch.float32) - final[name].to(torch.float32)
    differing = differing_tensors(space.state_tensors(), final)
    if differing:
        raise CheckpointError(f"replaying {run}'s {iteration} logged updates did not end on its checkpoint's mean "
                              f"({len(differing)} tensors differ, e.g. {differing[0]}); averaging its iterates "
                              "needs an exact replay (on the run's device, with the evotune version that trained it).")
    space.load_state_tensors({name: (final[name] + offsets[name] / count).to(final[name].dtype) if count > 1
                              else final[name] for name in final})
    return backend, summarize(count, iteration, config.iterations)


def summarize(count: int, iteration: int, planned: int) -> dict:
    """What was averaged, by iteration number; a run short of its planned iterations (still training, or stopped)
    says so, since its last iterates are not the finished run's."""
    first = iteration - count + 1
    summary = {"average_last": count, "iterations": iteration, "first_averaged_iteration": first,
               "replay_matches_checkpoint": True}
    if iteration < planned:
        summary["note"] = (f"the run's checkpoint holds {iteration} of its {planned} iterations (a run still "
                           f"training, or stopped early): this is the average of iterations {first} to {iteration}.")
    return summary


def require_run_directory(run: Path) -> None:
    # checkpoint.old or checkpoint.tmp alone: a train renaming its newest save into place at this instant
    if not (run / "config.yaml").is_file() or not any(
            (run / name).exists() for name in ("checkpoint", "checkpoint.old", "checkpoint.tmp")):
        raise ConfigError(f"--average-last needs an `evotune train` run directory (config.yaml and checkpoint/), "
                          f"and {run} is not one; pass the run's directory, not its final/ or checkpoint/.")


def replay_config(config: Any) -> Any:
    """The run's config as the replay loads it: the hf backend in this process (a vLLM run's updates replay there),
    and an INT8/INT4 run's base unquantized: bitsandbytes' layers can be neither cast nor merged into a float model,
    and such a run searches only its fp32 adapter, which the replay rebuilds the same over a float base (the check
    against the checkpoint's mean confirms it bit for bit)."""
    from ..builders import on_hf_backend

    values = on_hf_backend(config).to_dict()
    if values.get("quantization", "none") != "none":
        values.update(quantization="none", int4_type="nf4", int4_double_quantization=False, int4_compute_dtype=None)
    return TrainConfig.from_dict(values)


def read_newest_checkpoint(run: Path) -> dict:
    """checkpoint/ read whole and unchanged while it was read; never checkpoint.old, whose log ends at an earlier
    iteration, so that its last K iterates are other iterations than the run's last K. A read that overlaps a
    running train's save is retried; one that keeps failing while a save is under way is reported as such, not as
    damage (the run is healthy)."""
    directory, problem = run / "checkpoint", None
    for attempt in range(READ_ATTEMPTS):
        if attempt:
            time.sleep(RETRY_SECONDS)
        identity = _identity(directory)
        problem, saved = _read_checked(directory)
        # a missing checkpoint/ is never stable: a save may be between its two renames, and the look at
        # _save_under_way below comes later than the read (the save may have finished by then)
        stable = identity is not None and identity == _identity(directory)
        if stable and problem is None:
            return saved
        if stable and not _save_under_way(run):
            raise CheckpointError(damaged_message(run, problem))
    if _checkpoint_gone(run):  # after all the attempts: longer than any save's renames
        raise CheckpointError(damaged_message(run, "it is missing"))
    raise CheckpointError(changing_message(run, problem))


def _checkpoint_gone(run: Path) -> bool:
    """Neither checkpoint/ nor a save's checkpoint.tmp. checkpoint.tmp is looked at first: a save renames it to
    checkpoint/, so looked at the other way round a rename between the two looks would show neither."""
    return not (run / "checkpoint.tmp").exists() and not (run / "checkpoint").exists()


def _identity(directory: Path) -> tuple | None:
    """Which checkpoint/ this is: a save renames a new directory into place, and none changes one in place."""
    try:
        stat = directory.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns


def _read_checked(directory: Path) -> tuple[str | None, dict | None]:
    """(what is wrong, None) or (None, the checkpoint), its checksums checked."""
    if not directory.exists():
        return "it is missing", None
    problem = verify_checkpoint(directory)
    if problem:
        return problem, None
    try:
        return None, load_checkpoint(directory, verify=False)
    except CheckpointError as exc:
        return problem_of(exc), None


def _save_under_way(run: Path) -> bool:
    return (run / "checkpoint.tmp").exists() or not (run / "checkpoint").exists()  # .tmp first: see _checkpoint_gone


def damaged_message(run: Path, problem: str | None) -> str:
    """A damaged newest checkpoint: what is wrong, why the older one is not used, and the fix."""
    old, final = run / "checkpoint.old", "" if (run / "final").is_dir() else " once it is finished"
    lead = (f"{run / 'checkpoint'} cannot be used ({problem}). --average-last rebuilds the last iterates from the "
            "update log of the run's newest checkpoint only: checkpoint.old logs fewer iterations, and averaging "
            "it would average other iterations than the run's last ones.")
    plain = f"export {run} without --average-last (its final/ model{final})"
    if old.is_dir() and verify_checkpoint(old) is None:
        return (f"{lead} Fix: resume the run, which rewrites checkpoint/ from checkpoint.old (iteration "
                f"{load_state(old)['iteration']}) by repeating the same iterations exactly: `evotune train "
                f"--output-dir {run} --resume`, then export again; or {plain}.")
    return f"{lead} No intact checkpoint is left, so the iterates cannot be rebuilt: {plain}."


def changing_message(run: Path, problem: str | None) -> str:
    """checkpoint/ kept changing, or stayed incomplete beside a save under way: a train writing the run now."""
    seen = f" ({problem})" if problem else ""
    return (f"{run / 'checkpoint'} changed while export read it, or stayed incomplete while a checkpoint save was "
            f"under way{seen}: an `evotune train` is most likely writing this run right now, and the run itself is "
            "fine. Wait until it finishes (or retry in a moment) and export again. If no train is running (a save "
            f"was killed), `evotune train --output-dir {run} --resume` completes the run from its newest intact "
            "checkpoint.")

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

from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError, ConfigError


def average_last_iterates(run: Path, count: int) -> tuple[Any, dict]:
    """(backend whose model holds the mean of the run's last `count` iterates, summary). The run's checkpoint/
    must hold its last iteration (a finished run's does)."""
    from ..backends.base import resolve_device
    from ..builders import build_space, load_backend, on_hf_backend
    from .checkpoint import find_checkpoint, load_checkpoint, verify_checkpoint
    from ..config.train import load_config
    from ..spaces.base import differing_tensors
    from ..types import update_from_dict

    if not (run / "config.yaml").is_file() or not (run / "checkpoint").exists():
        raise ConfigError(f"--average-last needs an `evotune train` run directory (config.yaml and checkpoint/), "
                          f"and {run} is not one; pass the run's directory, not its final/ or checkpoint/.")
    checkpoint = find_checkpoint(run / "checkpoint")
    if checkpoint is None:
        raise CheckpointError(f"{run / 'checkpoint'} is damaged ({verify_checkpoint(run / 'checkpoint')}); the "
                              "iterates cannot be rebuilt without its update log.")
    saved = load_checkpoint(checkpoint)
    updates, iteration = saved["update_log"], int(saved["state"]["iteration"])
    if any(entry.get("kind") == "mean" for entry in updates):
        raise ConfigError(f"{run} is a CMA-ES run (strategy: cma): its log keeps only the newest mean (a mean "
                          "update is absolute), so its earlier iterates cannot be rebuilt; --average-last works on "
                          "OpenES runs, whose log keeps every update.")
    if len(updates) != iteration:
        raise CheckpointError(f"{checkpoint} logs {len(updates)} updates for {iteration} iterations; the run's "
                              "iterates cannot be rebuilt from it.")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= iteration:
        raise ConfigError(f"--average-last is {count!r}, but the run's checkpoint holds {iteration} iterations; "
                          f"choose a number of last iterates from 1 to {iteration}.")
    config = on_hf_backend(load_config(run / "config.yaml"))  # a vLLM run's updates replay on the hf backend
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
    return backend, {"average_last": count, "iterations": iteration, "first_averaged_iteration": iteration - count + 1,
                     "replay_matches_checkpoint": True}

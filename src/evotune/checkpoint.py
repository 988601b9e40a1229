"""Resumable run state: small JSON + the exact fp32 mean, written atomically.

A checkpoint holds the space's mean (fp32 master tensors), the strategy and optimizer
state, and the update log: per iteration the (seeds, coefficients) that produced it,
so the weights can also be rebuilt from the base model by replay (ES state is small).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

STATE_FILE = "state.json"


def _contiguous(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().contiguous().cpu() for name, tensor in tensors.items()}


def save_checkpoint(directory: Path, state: dict[str, Any], space_tensors: dict[str, torch.Tensor],
                    optimizer_tensors: dict[str, torch.Tensor], update_log: list[dict]) -> None:
    """Write to a sibling temp dir, then swap it in: a kill mid-write leaves the old checkpoint."""
    directory = Path(directory)
    staging = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    save_file(_contiguous(space_tensors), str(staging / "space.safetensors"))
    if optimizer_tensors:
        save_file(_contiguous(optimizer_tensors), str(staging / "optimizer.safetensors"))
    (staging / "updates.json").write_text(json.dumps(update_log))
    (staging / STATE_FILE).write_text(json.dumps(state, indent=2))
    previous = directory.with_name(directory.name + ".old")
    if directory.exists():
        os.replace(directory, previous)
    os.replace(staging, directory)
    shutil.rmtree(previous, ignore_errors=True)


def find_checkpoint(directory: Path) -> Path | None:
    """The latest complete checkpoint (falls back to .old if a swap was interrupted)."""
    directory = Path(directory)
    for candidate in (directory, directory.with_name(directory.name + ".old")):
        if (candidate / STATE_FILE).exists():
            return candidate
    return None


def load_state(directory: Path) -> dict[str, Any]:
    """The checkpoint's small JSON state alone (iteration, strategy state), without the tensors."""
    return json.loads((Path(directory) / STATE_FILE).read_text())


def load_checkpoint(directory: Path) -> dict[str, Any]:
    directory = Path(directory)
    optimizer_path = directory / "optimizer.safetensors"
    return {
        "state": load_state(directory),
        "space_tensors": load_file(str(directory / "space.safetensors")),
        "optimizer_tensors": load_file(str(optimizer_path)) if optimizer_path.exists() else {},
        "update_log": json.loads((directory / "updates.json").read_text()),
    }

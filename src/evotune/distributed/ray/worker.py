"""The body of a Ray actor: one replica, rebuilt from the checkpoint and the update log, that evaluates units
and applies the driver's updates. Plain Python: Ray makes it an actor (pool.py), and tests use it without Ray."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ...files.checkpoint import load_checkpoint
from ...import_utils import startup_imports
from ...types import Member, Update
from ..base import Replica
from ..units import UnitRewards, unit_rewards
from .connection import import_ray


class ReplicaWorker:
    """The body of a Ray actor: one replica (task, backend, space with its optimizer), built by the
    picklable factory the driver's builder made, so every actor has the configured backend and space."""

    def __init__(self, replica_factory: Callable[[], Replica], state: dict | None = None,
                 num_threads: int | None = None):
        with startup_imports():  # the actor's own process: its replica lives as long as it does
            import torch

            if num_threads:
                torch.set_num_threads(num_threads)
            self.replica = replica_factory()
        self.next_iteration = 0  # the iteration of the first update not yet in this replica's weights
        if state:
            self.load(state)

    def load(self, state: dict) -> None:
        """Rebuild the driver's mean: the checkpoint (mean and optimizer), then the updates logged after it."""
        space = self.replica.space
        start = 0
        if state.get("checkpoint"):
            checkpoint = load_checkpoint(state["checkpoint"])
            space.load_state_tensors(checkpoint["space_tensors"])
            space.load_state_dict(checkpoint["state"].get("space", {}), checkpoint["optimizer_tensors"])
            start = checkpoint["state"]["iteration"]  # the updates before it are in the loaded weights
        entries = [entry for entry in state.get("log", []) if entry["iteration"] >= start]
        space.replay(entries)
        self.next_iteration = entries[-1]["iteration"] + 1 if entries else start

    def ready(self) -> int:
        return os.getpid()

    def node(self) -> str:
        """The id of the Ray node this actor runs on."""
        return import_ray().get_runtime_context().get_node_id()

    def devices(self) -> dict[str, Any]:
        """The GPUs Ray gave this actor and what its engine sees (CUDA_VISIBLE_DEVICES)."""
        ray = import_ray()
        return {"gpu_ids": [str(gpu) for gpu in ray.get_gpu_ids()],
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def process_tree(self) -> list[int]:
        """This actor's descendant processes (an engine core, its workers)."""
        import psutil

        return [child.pid for child in psutil.Process().children(recursive=True)]

    def backend_name(self) -> str:
        """The class of this actor's backend (HFBackend, VLLMBackend): what the config asked for."""
        return type(self.replica.backend).__name__

    def evaluate(self, candidate: Member, row_indices: list[int]) -> UnitRewards:
        """One unit: `candidate` on the prompt rows at `row_indices`; its rewards, one per prompt."""
        replica = self.replica
        rows = [replica.task.train_rows[i] for i in row_indices]
        replica.space.apply(candidate)  # mean + perturbation, written from the exact mean: no restore needed between
        completions = replica.backend.generate([row["prompt"] for row in rows], replica.max_new_tokens)
        return unit_rewards(replica.task.rewards(rows, completions))

    def apply_update(self, update: Update) -> None:
        # An actor that started late loaded the run's checkpoint as it is now, which may hold updates the driver
        # also queued for it while it started: those are in its weights already.
        if update.iteration < self.next_iteration:
            return
        self.replica.space.apply_update(update)  # also writes the live weights back to the mean
        self.next_iteration = update.iteration + 1

    def checksum(self) -> str:
        return self.replica.space.checksum()

    def noise_fingerprint(self) -> str:
        return self.replica.space.noise_fingerprint()

"""Evaluate a population on a Ray actor pool: one model replica per actor, only seeds travel.

ES is embarrassingly parallel (Salimans et al. 2017; Qiu et al., arXiv 2509.24372; ESSA,
arXiv 2507.04453, reports near-linear scaling from 8 to 128 GPUs). Each actor holds a replica
(backend, space, task) built from the run's config; the driver holds the strategy. Per
iteration the driver sends each candidate (a seed and scale, or a small vector) with the
prompt-row indices, and gets one scalar reward back; then every actor applies the same update
from (seeds, coefficients), or adopts CMA-ES's small mean vector, so weights never cross the
wire after start-up. Members are handed out as actors free up (a slow actor does not stall the
iteration); an actor that dies has its member re-run elsewhere and is replaced by one rebuilt
from the last checkpoint plus the update log, so the iteration's result does not change.
Every `checksum_every` iterations all replicas hash their mean and a mismatch stops the run.

This is the only module that imports ray.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pickle
from collections import deque
from typing import Any, Callable

import numpy as np

from ..errors import ConfigError, EvotuneError


def is_ray_available() -> bool:
    return importlib.util.find_spec("ray") is not None


def _ray():
    if not is_ray_available():
        raise ConfigError("`distributed: ray` needs Ray: pip install 'evotune[ray]' (or set `distributed: local`).")
    import ray

    return ray


def mean_checksum(space: Any) -> str:
    """A hash of the space's exact mean (every state tensor's bytes, in name order)."""
    import torch

    digest = hashlib.blake2b(digest_size=16)
    for name, tensor in sorted(space.state_tensors().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class ReplicaWorker:
    """The body of a Ray actor: one replica of (task, backend, space, optimizer) from the run's config."""

    def __init__(self, config: dict, state: dict | None = None, num_threads: int | None = None):
        import torch

        from ..backends import HFBackend
        from ..builders import build_space, build_strategy
        from ..config import TrainConfig
        from ..trainer import build_task, resolve_device

        if num_threads:
            torch.set_num_threads(num_threads)
        self.config = TrainConfig.from_dict(config)
        self.task = build_task(self.config)
        self.backend = HFBackend.load(self.config.model, self.config.dtype, resolve_device(self.config.device),
                                      self.config.generation_batch_size, self.config.quantization)
        self.space = build_space(self.config, self.backend)
        # The same optimizer as the driver's, fed the same updates: its state (Adam moments) stays equal.
        self.optimizer = getattr(build_strategy(self.config, self.space), "optimizer", None)
        if state:
            self.load(state)

    def load(self, state: dict) -> None:
        """Rebuild the mean: the checkpoint's tensors, then the logged updates after it, or a CMA-ES mean."""
        from ..checkpoint import load_checkpoint

        if state.get("checkpoint"):
            checkpoint = load_checkpoint(state["checkpoint"])
            self.space.load_state_tensors(checkpoint["space_tensors"])
            if self.optimizer is not None:
                self.optimizer.load_state_dict(checkpoint["state"]["strategy"]["optimizer"],
                                               checkpoint["optimizer_tensors"])
        if state.get("log"):
            self.space.replay(state["log"], self.optimizer)
        if state.get("mean") is not None:
            self.space.set_mean(np.asarray(state["mean"]))

    def ready(self) -> int:
        return os.getpid()

    def evaluate(self, index: int, candidate: Any, row_indices: list[int]) -> tuple[int, float]:
        from .local import mean_reward

        rows = [self.task.train_rows[i] for i in row_indices]
        self.space.apply(candidate)  # mean + perturbation, written from the exact mean: no restore needed between
        completions = self.backend.generate([row["prompt"] for row in rows], self.config.max_new_tokens)
        return index, mean_reward(self.task, rows, completions)

    def update(self, seeds: list[int], coefficients: list[float]) -> None:
        self.space.update(seeds, coefficients, self.optimizer)  # also writes the live weights back to the mean

    def set_mean(self, vector: np.ndarray) -> None:
        self.space.set_mean(vector)

    def checksum(self) -> str:
        return mean_checksum(self.space)


def _size(*values: Any) -> int:
    return len(pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL))


class RayEvaluator:
    """LocalEvaluator's interface over `num_workers` Ray actors, plus sync() after each update.

    state_fn() -> {"checkpoint": path | None, "log": [...], "mean": vector | None} describes how a
    new actor rebuilds the driver's current mean (the trainer provides it).
    """

    def __init__(self, config: Any, num_workers: int, state_fn: Callable[[], dict], address: str | None = None,
                 checksum_every: int = 10, num_cpus: float = 1, num_gpus: float = 0,
                 driver_checksum: Callable[[], str] | None = None):
        ray = _ray()
        if not ray.is_initialized():
            address = address or os.environ.get("RAY_ADDRESS")
            ray.init(address=address, include_dashboard=False, logging_level="ERROR",
                     **({} if address else {"num_cpus": max(int(np.ceil(num_cpus * num_workers)), 1)}))
        self.ray = ray
        self.config = config.to_dict()
        self.num_workers = num_workers
        self.state_fn = state_fn
        self.checksum_every = checksum_every
        self.driver_checksum = driver_checksum
        self.actor_class = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0)(ReplicaWorker)
        self.num_threads = max(1, int(num_cpus))
        self.workers: list[Any] = []
        self.replaced = 0  # actors rebuilt after a failure, over the run
        self.iteration_metrics: dict[str, float] = {}
        self._bytes = 0

    def _spawn(self) -> Any:
        state = self.state_fn()
        self._bytes += _size(self.config, state)
        return self.actor_class.remote(self.config, state, self.num_threads)

    def start(self) -> None:
        if not self.workers:
            self.workers = [self._spawn() for _ in range(self.num_workers)]
            self.ray.get([worker.ready.remote() for worker in self.workers])

    def _replace(self, dead: Any) -> Any:
        self.ray.kill(dead, no_restart=True)
        fresh = self._spawn()
        self.workers[self.workers.index(dead)] = fresh
        self.replaced += 1
        return fresh

    def evaluate(self, candidates: list, rows: list[dict], row_indices: list[int] | None = None,
                 on_candidate: Callable[[int], None] | None = None) -> np.ndarray:
        """(pop,) rewards; members go to whichever actor is free; a dead actor's member is re-run."""
        if row_indices is None:
            raise ConfigError("the Ray evaluator sends prompt-row indices, not rows: pass row_indices.")
        self.start()
        ray = self.ray
        self._bytes = 0
        rewards = np.full(len(candidates), np.nan)
        pending, idle, in_flight = deque(range(len(candidates))), list(self.workers), {}
        while pending or in_flight:
            while pending and idle:
                worker, index = idle.pop(0), pending.popleft()
                in_flight[worker.evaluate.remote(index, candidates[index], row_indices)] = (worker, index)
                self._bytes += _size(index, candidates[index], row_indices)
            [done], _ = ray.wait(list(in_flight), num_returns=1)
            worker, index = in_flight.pop(done)
            try:
                _, reward = ray.get(done)
            except ray.exceptions.RayActorError:  # the actor died: re-run its member on a rebuilt one
                pending.appendleft(index)
                fresh = self._replace(worker)
                ray.get(fresh.ready.remote())
                idle.append(fresh)
                continue
            except ray.exceptions.RayTaskError as error:  # a reward function raised: report it as itself
                cause = getattr(error, "cause", None)
                raise (cause if isinstance(cause, EvotuneError) else error) from None
            self._bytes += _size(index, reward)
            rewards[index] = reward
            idle.append(worker)
            if on_candidate is not None:
                on_candidate(index)
        return rewards

    def sync(self, iteration: int, seeds: list[int] | None = None, coefficients: list[float] | None = None,
             mean: np.ndarray | None = None) -> None:
        """Every actor applies the driver's update (seeds, coefficients) or adopts `mean` (CMA-ES)."""
        if mean is not None:
            calls = [worker.set_mean.remote(mean) for worker in self.workers]
            self._bytes += _size(mean) * len(self.workers)
        else:
            calls = [worker.update.remote(seeds, coefficients) for worker in self.workers]
            self._bytes += _size(seeds, coefficients) * len(self.workers)
        self.ray.get(calls)
        if self.checksum_every and iteration % self.checksum_every == 0:
            self.check_replicas()
        self.iteration_metrics = {"bytes_exchanged": float(self._bytes), "workers_replaced": float(self.replaced)}

    def check_replicas(self) -> None:
        sums = self.ray.get([worker.checksum.remote() for worker in self.workers])
        reference = self.driver_checksum() if self.driver_checksum else sums[0]
        if any(value != reference for value in sums):
            raise EvotuneError(f"worker weights diverged from the driver's (checksums {sums} vs {reference}): "
                               "every replica must apply identical updates. Check that all workers run the same "
                               "evotune, torch and model files, then resume from the last checkpoint.")

    def close(self) -> None:
        for worker in self.workers:
            self.ray.kill(worker, no_restart=True)
        self.workers = []

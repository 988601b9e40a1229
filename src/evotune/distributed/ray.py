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

import importlib.util
import os
import pickle
from collections import deque
from typing import Any, Callable

import numpy as np

from ..errors import ConfigError, EvotuneError
from ..types import Member, Population, Update
from .base import Evaluator, Replica


def is_ray_available() -> bool:
    return importlib.util.find_spec("ray") is not None


def _ray():
    if not is_ray_available():
        raise ConfigError("`distributed: ray` needs Ray: pip install 'evotune[ray]' (or set `distributed: local`).")
    import ray

    return ray


def _connect(address: str | None, local_cpus: float) -> Any:
    """Ray, initialized once: the cluster at `address` (or $RAY_ADDRESS), else a local instance with
    `local_cpus` cores (rounded up)."""
    ray = _ray()
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS")
        ray.init(address=address, include_dashboard=False, logging_level="ERROR",
                 **({} if address else {"num_cpus": max(int(np.ceil(local_cpus)), 1)}))
    return ray


class ReplicaWorker:
    """The body of a Ray actor: one replica (task, backend, space with its optimizer), built by the
    picklable factory the driver's builder made, so every actor has the configured backend and space."""

    def __init__(self, replica_factory: Callable[[], Replica], state: dict | None = None,
                 num_threads: int | None = None):
        import torch

        if num_threads:
            torch.set_num_threads(num_threads)
        self.replica = replica_factory()
        if state:
            self.load(state)

    def load(self, state: dict) -> None:
        """Rebuild the driver's mean: the checkpoint (mean and optimizer), then the updates logged after it."""
        from ..checkpoint import load_checkpoint

        space = self.replica.space
        start = 0
        if state.get("checkpoint"):
            checkpoint = load_checkpoint(state["checkpoint"])
            space.load_state_tensors(checkpoint["space_tensors"])
            space.load_state_dict(checkpoint["state"].get("space", {}), checkpoint["optimizer_tensors"])
            start = checkpoint["state"]["iteration"]  # the updates before it are in the loaded weights
        space.replay([entry for entry in state.get("log", []) if entry["iteration"] >= start])

    def ready(self) -> int:
        return os.getpid()

    def backend_name(self) -> str:
        """The class of this actor's backend (HFBackend, VLLMBackend): what the config asked for."""
        return type(self.replica.backend).__name__

    def evaluate(self, index: int, candidate: Member, row_indices: list[int]) -> tuple[int, float]:
        from .local import mean_reward

        replica = self.replica
        rows = [replica.task.train_rows[i] for i in row_indices]
        replica.space.apply(candidate)  # mean + perturbation, written from the exact mean: no restore needed between
        completions = replica.backend.generate([row["prompt"] for row in rows], replica.max_new_tokens)
        return index, mean_reward(replica.task, rows, completions)

    def apply_update(self, update: Update) -> None:
        self.replica.space.apply_update(update)  # also writes the live weights back to the mean

    def checksum(self) -> str:
        return self.replica.space.checksum()


def _size(*values: Any) -> int:
    return len(pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL))


class RayEvaluator(Evaluator):
    """The evaluator contract over `num_workers` Ray actors; sync() sends each update to every actor.

    replica_factory() builds one replica inside an actor (picklable: the builder's ReplicaFactory).
    state_fn() -> {"checkpoint": path | None, "log": [update dicts]} describes how a new actor
    rebuilds the driver's current mean (the trainer provides it).
    """

    def __init__(self, replica_factory: Callable[[], Replica], num_workers: int, state_fn: Callable[[], dict],
                 address: str | None = None, checksum_every: int = 10, num_cpus: float = 1, num_gpus: float = 0,
                 driver_checksum: Callable[[], str] | None = None):
        self.ray = ray = _connect(address, num_cpus * num_workers)
        self.replica_factory = replica_factory
        self.num_workers = num_workers
        self.state_fn = state_fn
        self.checksum_every = checksum_every
        self.driver_checksum = driver_checksum
        self.actor_class = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0)(ReplicaWorker)
        self.num_threads = max(1, int(num_cpus))
        self.workers: list[Any] = []
        self.replaced = 0  # actors rebuilt after a failure, over the run
        self._iteration_metrics: dict[str, float] = {}
        self._bytes = 0

    @property
    def iteration_metrics(self) -> dict[str, float]:
        return self._iteration_metrics

    def _spawn(self) -> Any:
        state = self.state_fn()
        self._bytes += _size(self.replica_factory, state)
        return self.actor_class.remote(self.replica_factory, state, self.num_threads)

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

    def evaluate(self, candidates: Population, rows: list[dict], row_indices: list[int] | None = None,
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

    def sync(self, update: Update) -> None:
        """Every actor applies the driver's update: seeds and coefficients, or CMA-ES's small mean."""
        calls = [worker.apply_update.remote(update) for worker in self.workers]
        self._bytes += _size(update) * len(self.workers)
        self.ray.get(calls)
        if self.checksum_every and (update.iteration + 1) % self.checksum_every == 0:
            self.check_replicas()
        self._iteration_metrics = {"bytes_exchanged": float(self._bytes), "workers_replaced": float(self.replaced)}

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


def _run_task(function: Callable[[], Any], num_threads: int) -> None:
    import torch

    torch.set_num_threads(num_threads)  # the task's share of the node, not every core
    function()


def run_tasks(functions: list[tuple[str, Callable[[], Any]]], max_parallel: int, num_cpus: float = 1,
              address: str | None = None) -> dict[str, BaseException]:
    """Run independent (name, function) jobs as Ray tasks, at most `max_parallel` at once, each with
    `num_cpus` cores; returns {name: exception} of the jobs that failed (the others' results are their
    side effects, e.g. run directories). Used by `evotune sweep --parallel` for one run per task."""
    ray = _connect(address, num_cpus * max_parallel)
    remote = ray.remote(num_cpus=num_cpus, max_retries=0)(_run_task)
    queue, running, failures = deque(functions), {}, {}
    while queue or running:
        while queue and len(running) < max_parallel:
            name, function = queue.popleft()
            running[remote.remote(function, max(1, int(num_cpus)))] = name
        done, _ = ray.wait(list(running), num_returns=1)
        name = running.pop(done[0])
        try:
            ray.get(done[0])
        except Exception as error:  # a failed run is reported; the others go on
            failures[name] = getattr(error, "cause", None) or error
    return failures

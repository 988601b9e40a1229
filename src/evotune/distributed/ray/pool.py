"""RayEvaluator: the evaluator contract over a pool of Ray actors (see the package's docstring)."""

from __future__ import annotations

import os
import pickle
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from ...errors import ConfigError, EvotuneError
from ...types import Member, Population, Update
from ..base import Replica
from ..units import Event, UnitEvaluator
from .connection import connect
from .worker import ReplicaWorker


def _size(*values: Any) -> int:
    return len(pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL))


class RayEvaluator(UnitEvaluator):
    """The evaluator contract over `num_workers` Ray actors, spread over the cluster's nodes: units (candidate,
    shard of the prompts) go to whichever actor is free (units.py); sync() sends each update to every actor.

    replica_factory() builds one replica inside an actor (picklable: the builder's ReplicaFactory).
    state_fn() -> {"checkpoint": path | None, "log": [update dicts]} describes how a new actor
    rebuilds the driver's current mean (the trainer provides it).
    """

    def __init__(self, replica_factory: Callable[[], Replica], num_workers: int, state_fn: Callable[[], dict],
                 address: str | None = None, checksum_every: int = 10, num_cpus: float = 1, num_gpus: float = 0,
                 driver_checksum: Callable[[], str] | None = None, driver_reservation: Any = None,
                 driver_fingerprint: Callable[[], str] | None = None, shards: int | None = None,
                 straggler_factor: float = 0.0, timeout: float = 30.0, py_modules: list[str] | None = None):
        """driver_reservation: reserve_driver_gpus' holder, released by close(); driver_fingerprint: which noise
        the driver's replica draws (Space.noise_fingerprint), checked against every actor's at start; shards and
        straggler_factor: see UnitEvaluator; timeout: the cluster must answer within it, and every worker find room
        within 10 times it; py_modules: local files or package folders every actor imports from (a reward module
        beside the config), shipped by Ray's runtime_env to whichever node the actor runs on."""
        super().__init__(num_workers, shards, straggler_factor)
        self.driver_fingerprint = driver_fingerprint
        self.local = not (address or os.environ.get("RAY_ADDRESS"))
        self.ray = ray = connect(address, timeout, py_modules)
        self.num_cpus = num_cpus
        self.start_timeout = 10 * timeout
        self.driver_reservation = driver_reservation
        self.num_gpus = num_gpus
        self.replica_factory = replica_factory
        self.state_fn = state_fn
        self.checksum_every = checksum_every
        self.driver_checksum = driver_checksum
        # SPREAD: one actor per node before two on any, so a lost node takes as few units as possible
        self.actor_class = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0)(ReplicaWorker).options(
            scheduling_strategy="SPREAD")
        self.num_threads = max(1, int(num_cpus))
        self.workers: list[Any] = []
        self.starting: dict[Any, Any] = {}  # ready() reference -> a replacement actor not yet ready
        self.owners: dict[Any, Any] = {}  # unit reference -> the actor computing it
        self.unsynced: dict[Any, list] = {}  # actor -> its apply_update references not yet checked
        self.replaced = 0  # actors rebuilt after a failure, over the run
        self._iteration_metrics: dict[str, float] = {}
        self._bytes = 0

    @property
    def iteration_metrics(self) -> dict[str, float]:
        return self._iteration_metrics

    def now(self) -> float:
        return time.monotonic()

    def _spawn(self) -> Any:
        state = self.state_fn()
        self._bytes += _size(self.replica_factory, state)
        return self.actor_class.remote(self.replica_factory, state, self.num_threads)

    def start(self) -> None:
        if not self.workers:
            free = self.ray.available_resources().get("GPU", 0.0)
            if self.num_gpus and free < self.num_gpus * self.num_workers:
                raise ConfigError(
                    f"{self.num_workers} workers x {self.num_gpus:g} GPUs need {self.num_workers * self.num_gpus:g} "
                    f"GPUs and Ray has {free:g} free (the driver's own engine holds its share). Set `workers` to "
                    f"{int(free // self.num_gpus) or 1}, or share GPUs: `worker_num_gpus: 0.5` with "
                    "`gpu_memory_utilization: 0.4`.")
            cpus = self.ray.cluster_resources().get("CPU", 0.0)
            if self.local and cpus < self.num_cpus * self.num_workers:
                raise ConfigError(
                    f"`workers` {self.num_workers} x `worker_num_cpus` {self.num_cpus:g} need "
                    f"{self.num_workers * self.num_cpus:g} CPUs; the local Ray has this machine's {cpus:g}. Set "
                    f"`workers` to {max(int(cpus // self.num_cpus), 1)} or fewer (or lower `worker_num_cpus`), or "
                    "join a cluster with `ray_address`.")
            self.workers = [self._spawn() for _ in range(self.num_workers)]
            self._wait_ready([worker.ready.remote() for worker in self.workers])
            self.idle = deque(self.workers)
            self.check_noise()

    def _wait_ready(self, references: list[Any]) -> None:
        """Every actor up, or a note every 30 s on how many still wait and for what; after `start_timeout`
        seconds the run stops, naming them, rather than waiting forever for a cluster that has no room."""
        started, pending = self.now(), list(references)
        while pending:
            left = self.start_timeout - (self.now() - started)
            if left <= 0:
                free = self.ray.available_resources()
                for worker in self.workers:
                    self.ray.kill(worker)
                raise ConfigError(
                    f"{len(pending)} of {self.num_workers} workers were not up after {self.start_timeout:g} s (each "
                    f"needs {self.num_cpus:g} CPUs and {self.num_gpus:g} GPUs; the cluster has "
                    f"{free.get('CPU', 0.0):g} CPUs and {free.get('GPU', 0.0):g} GPUs free). Lower `workers`, add "
                    "nodes, or raise `ray_timeout`.")
            done, pending = self.ray.wait(pending, num_returns=len(pending), timeout=min(30.0, left))
            self.ray.get(done)  # an actor that failed to build its replica raises here
            if pending:
                free = self.ray.available_resources()
                print(f"evotune: {len(pending)} of {self.num_workers} workers not up yet after "
                      f"{self.now() - started:.0f} s, waiting for room or for their model to load (each needs "
                      f"{self.num_cpus:g} CPUs and {self.num_gpus:g} GPUs; free now: {free.get('CPU', 0.0):g} CPUs, "
                      f"{free.get('GPU', 0.0):g} GPUs); stopping after {self.start_timeout:g} s.",
                      file=sys.stderr, flush=True)

    def node_of(self) -> dict[Any, str]:
        """Each ready actor's node id (where SPREAD placed it)."""
        ready = [worker for worker in self.workers if worker not in self.starting.values()]
        return dict(zip(ready, self.ray.get([worker.node.remote() for worker in ready])))

    def check_noise(self) -> None:
        """Every actor must draw the driver's noise for a seed, or the replicas would diverge at the first update."""
        if self.driver_fingerprint is None:
            return
        reference = self.driver_fingerprint()
        prints = self.ray.get([worker.noise_fingerprint.remote() for worker in self.workers])
        if any(value != reference for value in prints):
            raise EvotuneError(
                f"the workers draw different noise for the same seed than the driver (fingerprints {prints} vs "
                f"{reference}): gaussian noise from torch's CUDA generator depends on the GPU model, so a CPU "
                "driver with GPU workers, or GPUs of two models, cannot share a run. Set `noise: rademacher` "
                "(the same numbers on every device, and as good for ES), or run every replica on one kind of device.")

    def _replace(self, dead: Any) -> None:
        """A fresh actor in the dead one's place, rebuilt from the checkpoint and update log; it takes work once
        ready (on a shrunken cluster that is when a node joins: Ray holds it until resources free up). An actor
        already replaced (its straggler copy failing after its checksum did) is left alone."""
        if dead not in self.workers:
            return
        self.ray.kill(dead, no_restart=True)
        self.unsynced.pop(dead, None)
        fresh = self._spawn()
        self.workers[self.workers.index(dead)] = fresh
        self.starting[fresh.ready.remote()] = fresh
        self.replaced += 1

    def submit(self, worker: Any, candidate: Member, row_indices: list[int]) -> Any:
        reference = worker.evaluate.remote(candidate, row_indices)
        self.owners[reference] = worker
        self._bytes += _size(candidate, row_indices)
        return reference

    def poll(self, timeout: float | None) -> list[Event]:
        references = [*self.owners, *self.starting]
        if not references:
            raise EvotuneError("no Ray actor is left to evaluate on, and none is starting: check the cluster "
                               "(`ray status`) and resume from the last checkpoint.")
        done, _ = self.ray.wait(references, num_returns=1, timeout=timeout)
        if done:  # take everything already back in one pass
            done, _ = self.ray.wait(references, num_returns=len(references), timeout=0)
        return [event for reference in done if (event := self._event(reference)) is not None]

    def _event(self, reference: Any) -> Event | None:
        ray = self.ray
        starting = reference in self.starting
        worker = self.starting.pop(reference) if starting else self.owners.pop(reference)
        try:
            value = ray.get(reference)
            for update in self.unsynced.pop(worker, []):  # ran before this unit (one caller's calls keep order)
                ray.get(update)
        except ray.exceptions.RayActorError:  # the actor (or its node) died: the scheduler re-sends its unit
            self._replace(worker)
            return None if starting else Event("lost", worker, reference)
        except ray.exceptions.RayTaskError as error:  # a reward function raised: report it as itself
            cause = getattr(error, "cause", None)
            raise (cause if isinstance(cause, EvotuneError) else error) from None
        if starting:
            return Event("joined", worker)
        self._bytes += _size(value)
        return Event("finished", worker, reference, value)

    def evaluate(self, candidates: Population, rows: list[dict], row_indices: list[int] | None = None,
                 on_candidate: Callable[[int], None] | None = None) -> np.ndarray:
        """(pop,) rewards; units go to whichever actor is free; a dead actor's unit is re-run on another."""
        self._bytes = 0
        return super().evaluate(candidates, rows, row_indices, on_candidate)

    def sync(self, update: Update) -> None:
        """Every actor applies the driver's update (seeds and coefficients, or CMA-ES's small mean) before its next
        unit; the driver does not wait for it, so an actor still busy with a straggler's copy holds nobody up."""
        for worker in self.workers:
            self.unsynced.setdefault(worker, []).append(worker.apply_update.remote(update))
        self._bytes += _size(update) * len(self.workers)
        if self.checksum_every and (update.iteration + 1) % self.checksum_every == 0:
            self.check_replicas()
        self._iteration_metrics = {"bytes_exchanged": float(self._bytes), "workers_replaced": float(self.replaced),
                                   "units_resent": float(self.resent)}

    def check_replicas(self) -> None:
        """Every ready actor's weights against the driver's. An actor lost meanwhile (its node gone) is replaced,
        not compared: its successor is rebuilt from the checkpoint and update log, and checked next time."""
        ready = [worker for worker in self.workers if worker not in self.starting.values()]
        sums = []
        for worker, reference in [(worker, worker.checksum.remote()) for worker in ready]:
            try:
                sums.append(self.ray.get(reference))
            except self.ray.exceptions.RayActorError:
                self._replace(worker)
        if not sums:
            return
        reference = self.driver_checksum() if self.driver_checksum else sums[0]
        if any(value != reference for value in sums):
            raise EvotuneError(f"worker weights diverged from the driver's (checksums {sums} vs {reference}): "
                               "every replica must apply identical updates. Check that all workers run the same "
                               "evotune, torch and model files, then resume from the last checkpoint.")

    def close(self, release_seconds: float = 15.0) -> None:
        """Stop the actors and give the driver's GPUs back to Ray (the run is over: no actor starts after). Returns
        once Ray lists the GPUs free again, or after `release_seconds`: ray.kill returns before Ray frees them, and
        a run started right after (a sweep's next point, a second Trainer) would find them still booked."""
        held = self.num_gpus * len(self.workers)
        if self.driver_reservation is not None:
            try:
                held += self.ray.get(self.driver_reservation.booked_gpus.remote())
            except Exception:  # noqa: BLE001 - a reservation already gone holds nothing
                pass
        expected = min(self.ray.available_resources().get("GPU", 0.0) + held,
                       self.ray.cluster_resources().get("GPU", 0.0)) if held else 0.0
        for worker in self.workers:
            self.ray.kill(worker, no_restart=True)
        self.workers, self.idle, self.starting, self.owners, self.unsynced = [], deque(), {}, {}, {}
        self.running = {}
        if self.driver_reservation is not None:
            self.ray.kill(self.driver_reservation, no_restart=True)
            self.driver_reservation = None
        deadline = time.monotonic() + release_seconds
        while held and self.ray.available_resources().get("GPU", 0.0) < expected - 1e-9 and time.monotonic() < deadline:
            time.sleep(0.1)

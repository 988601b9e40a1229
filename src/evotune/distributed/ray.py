"""Evaluate a population on a Ray actor pool: one model replica per actor, only seeds travel.

ES is embarrassingly parallel (Salimans et al. 2017; Qiu et al., arXiv 2509.24372; ESSA,
arXiv 2507.04453, reports near-linear scaling from 8 to 128 GPUs). Each actor holds a replica
(backend, space, task) built from the run's config; the driver holds the strategy. Per
iteration the driver sends work units, each a candidate (a seed and scale, or a small vector) with
the row indices of a shard of the prompts, and gets back the unit's per-prompt rewards, which the driver
combines exactly (units.py: any sharding gives the same rewards); then every actor applies the same update
from (seeds, coefficients), or adopts CMA-ES's small mean vector, so weights never cross the
wire after start-up. Units go to actors as they free up, spread over the cluster's nodes; a late
unit is sent again (first copy back wins); an actor that dies (or its node) has its unit re-run
elsewhere and is replaced by one rebuilt from the last checkpoint plus the update log, which starts
when the cluster has room again (a node joins), so the iteration's result does not change.
Every `checksum_every` iterations all replicas hash their mean and a mismatch stops the run.

GPUs: each actor asks Ray for its replica's GPUs (a vLLM engine: `tensor_parallel_size` of them; one
actor's resources are always on one node, so its ranks share a machine). The driver holds a replica of
its own (evaluation, checkpoints, final/), so `reserve_driver_gpus` books its GPUs in Ray first, on the
driver's node, and the driver's engine is started on exactly those: no actor is ever given a GPU the
driver's engine holds. A killed actor takes its engine processes down with it (Ray reaps an actor's
children, and every process with a separate-process engine runs a watchdog, backends/watchdog.py).

This is the only module that imports ray.
"""

from __future__ import annotations

import os
import pickle
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ConfigError, EvotuneError
from ..files.checkpoint import load_checkpoint
from ..import_utils import is_ray_available, startup_imports
from ..types import Member, Population, Update
from .base import Replica
from .units import Event, UnitEvaluator, UnitRewards, unit_rewards


def _ray():
    if not is_ray_available():
        raise ConfigError("`distributed: ray` needs Ray: pip install 'evotune[ray]' (or set `distributed: local`).")
    import ray

    return ray


def machine_cpus() -> int:
    """The CPU cores this process may use (its affinity mask where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _connect(address: str | None, timeout: float = 30.0) -> Any:
    """Ray, initialized once: the cluster at `address` (or $RAY_ADDRESS), else a local instance with this
    machine's cores (and the GPUs Ray finds). "local" is explicit because a bare ray.init() joins any cluster
    that `ray start` left running on this machine. Joining a cluster is bounded by `timeout` seconds, and every
    failure is one line naming the address, what was tried and what to check."""
    ray = _ray()
    if ray.is_initialized():
        return ray
    address = address or os.environ.get("RAY_ADDRESS")
    if not address or address == "local":
        ray.init(address="local", include_dashboard=False, logging_level="ERROR", num_cpus=machine_cpus())
        return ray
    source = "`ray_address`" if address != os.environ.get("RAY_ADDRESS") else "$RAY_ADDRESS"
    if address != "auto":
        _probe(address, source, timeout)
    _init_bounded(ray, address, source, timeout)
    return ray


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.removeprefix("ray://").rpartition(":")
    return host.strip("[]"), int(port)


def _probe(address: str, source: str, timeout: float) -> None:
    """A TCP connection to the head's port first: a closed port or an unreachable host fails here in seconds,
    where ray.init would retry for minutes."""
    import socket

    host, port = _host_port(address)
    try:
        socket.create_connection((host, port), timeout=min(timeout, 10.0)).close()
    except OSError as error:
        raise ConfigError(f"{source} {address}: nothing answers at {host} port {port} ({error.strerror or error}). "
                          f"Check that `ray start --head` runs on {host} and that {port} is the port it printed "
                          "(the GCS port, 6379 unless --port set another; ray:// addresses use the Ray Client port, "
                          "10001), and that no firewall is between; unset ray_address and $RAY_ADDRESS for a local "
                          "Ray instance.") from None


def _init_bounded(ray: Any, address: str, source: str, timeout: float) -> None:
    """ray.init on a thread, waited for at most `timeout` seconds."""
    import threading

    outcome: dict[str, BaseException | None] = {}

    def init() -> None:
        try:
            ray.init(address=address, include_dashboard=False, logging_level="ERROR")
            outcome["error"] = None
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = error

    thread = threading.Thread(target=init, name="evotune-ray-init", daemon=True)
    thread.start()
    thread.join(timeout)
    checks = ("Check that the cluster runs (`ray status` on its head) and that this is its address; a cluster "
              "started by `ray start` with token authentication (Ray 2.60's default) needs RAY_AUTH_MODE=token and "
              "its token in this shell too (docs/ray-cluster.md); and that this machine's Ray version is the "
              "cluster's.")
    if "error" not in outcome:
        raise ConfigError(f"{source} {address}: something answers there but did not complete Ray's handshake within "
                          f"{timeout:g} s (ray_timeout). {checks}")
    if outcome["error"] is not None:
        if address == "auto":
            raise ConfigError(f"{source} auto: no running Ray cluster was found on this machine "
                              f"({type(outcome['error']).__name__}). Start one with `ray start --head`, give the "
                              "head's HOST:PORT, or unset ray_address and $RAY_ADDRESS for a local Ray "
                              "instance.") from None
        raise ConfigError(f"{source} {address}: Ray could not join the cluster ({type(outcome['error']).__name__}: "
                          f"{str(outcome['error']).splitlines()[0] if str(outcome['error']) else ''}). "
                          f"{checks}") from None


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
        return _ray().get_runtime_context().get_node_id()

    def devices(self) -> dict[str, Any]:
        """The GPUs Ray gave this actor and what its engine sees (CUDA_VISIBLE_DEVICES)."""
        ray = _ray()
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


def _size(*values: Any) -> int:
    return len(pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL))


class GPUReservation:
    """An actor that does nothing but hold GPUs in Ray's books for the driver's own replica."""

    def gpu_ids(self) -> list[str]:
        return [str(gpu) for gpu in _ray().get_gpu_ids()]

    def booked_gpus(self) -> float:
        return _ray().get_runtime_context().get_assigned_resources().get("GPU", 0.0)


def reserve_driver_gpus(num_gpus: float, address: str | None, timeout: float = 30.0) -> tuple[Any, list[str]]:
    """Book `num_gpus` GPUs of the driver's node for the driver's replica; returns (the holding actor, the GPU
    ids Ray gave it). Keep the actor alive for as long as the driver's engine runs (ray.kill releases them)."""
    ray = _connect(address, timeout)
    free = ray.available_resources().get("GPU", 0.0)
    if free < num_gpus:
        raise ConfigError(f"the driver's own engine needs {num_gpus:g} GPUs and Ray has {free:g} free; free some, "
                          "or lower `tensor_parallel_size` / `worker_num_gpus`.")
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = ray.get_runtime_context().get_node_id()
    holder = ray.remote(num_cpus=0, num_gpus=num_gpus, max_restarts=0)(GPUReservation).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
    return holder, ray.get(holder.gpu_ids.remote())


def reserve_for_driver(num_gpus: float, address: str | None, timeout: float, engine: bool,
                       device: str) -> tuple[Any, str | None]:
    """Book the driver replica's GPUs (reserve_driver_gpus) and point its model at them: a vLLM engine through
    CUDA_VISIBLE_DEVICES, which its processes read when they start; an hf model in this process, where CUDA may
    already be initialised, by naming the device. Returns (the reservation, the hf model's device or None)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    holder, ids = reserve_driver_gpus(num_gpus, address, timeout)
    if engine:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
        return holder, None
    if not ids or not device.startswith("cuda"):
        return holder, None
    order = visible.split(",") if visible else None
    return holder, f"cuda:{order.index(ids[0]) if order else int(ids[0])}"


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
                 straggler_factor: float = 0.0, timeout: float = 30.0):
        """driver_reservation: reserve_driver_gpus' holder, released by close(); driver_fingerprint: which noise
        the driver's replica draws (Space.noise_fingerprint), checked against every actor's at start; shards and
        straggler_factor: see UnitEvaluator; timeout: the cluster must answer within it, and every worker find room
        within 10 times it."""
        super().__init__(num_workers, shards, straggler_factor)
        self.driver_fingerprint = driver_fingerprint
        self.local = not (address or os.environ.get("RAY_ADDRESS"))
        self.ray = ray = _connect(address, timeout)
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


def shutdown() -> None:
    """Stop this process's Ray connection (a local instance stops with it)."""
    if is_ray_available():
        _ray().shutdown()


def _run_task(function: Callable[[], Any], num_threads: int) -> None:
    import torch

    torch.set_num_threads(num_threads)  # the task's share of the node, not every core
    function()


def run_tasks(functions: list[tuple[str, Callable[[], Any]]], max_parallel: int, num_cpus: float = 1,
              address: str | None = None) -> dict[str, BaseException]:
    """Run independent (name, function) jobs as Ray tasks, at most `max_parallel` at once, each with
    `num_cpus` cores; returns {name: exception} of the jobs that failed (the others' results are their
    side effects, e.g. run directories). Used by `evotune sweep --parallel` for one run per task."""
    ray = _connect(address)
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

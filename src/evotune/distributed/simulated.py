"""A simulated worker pool behind the unit evaluator's transport: the driver's real loop, no model, no Ray.

For measuring what the coordinator costs at 10 to 1,000 workers on a machine that cannot hold 1,000 Ray actors
(bench/ray_cluster/simulate.py): every unit takes a modeled generation time on a virtual clock instead of
running a model, so the driver's own work (building units, picking workers, deadlines, combining shard sums,
serializing every message as Ray would) is all that uses the CPU. What it leaves out: Ray's own per-call cost
(the core worker's submit, the object store, gRPC to remote raylets), network latency and bandwidth, and real
generation's variance beyond the modeled jitter. bench/ray_cluster/ measures Ray's per-call cost separately.

Also a test double: a unit's value is a pure function of (candidate, prompt rows), as a deterministic replica's is,
so which copy of a re-sent unit wins cannot change the rewards.
"""

from __future__ import annotations

import heapq
import pickle
import time
import zlib
from collections import deque
from typing import Any

import numpy as np

from ..types import Member, Update
from .units import Event, UnitEvaluator, unit_rewards


def _size(*values: Any) -> int:
    return len(pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL))


def modeled_rewards(candidate: Member, row_indices: list[int]) -> np.ndarray:
    """One reward per prompt row, a pure function of the candidate and the row (a stand-in for a replica)."""
    key = zlib.crc32(pickle.dumps(candidate, protocol=pickle.HIGHEST_PROTOCOL))
    return np.array([zlib.crc32(f"{key}:{row}".encode()) / 2 ** 32 for row in row_indices])


class SimulatedEvaluator(UnitEvaluator):
    """`num_workers` simulated workers: a unit of n prompts takes unit_seconds x n / prompts_per_unit x jitter x the
    worker's slowdown, on a virtual clock; `slowdown` {worker: factor} makes stragglers, `lose_at` {worker: seconds}
    loses a worker (and its unit) at that virtual time, replaced by a fresh one after `spawn_seconds`."""

    def __init__(self, num_workers: int, unit_seconds: float, prompts_per_unit: float = 1.0, shards: int | None = None,
                 straggler_factor: float = 0.0, jitter: float = 0.0, slowdown: dict[int, float] | None = None,
                 lose_at: dict[int, float] | None = None, spawn_seconds: float = 0.0, seed: int = 0):
        super().__init__(num_workers, shards, straggler_factor)
        self.unit_seconds, self.prompts_per_unit = unit_seconds, prompts_per_unit
        self.jitter, self.slowdown, self.lose_at = jitter, dict(slowdown or {}), dict(lose_at or {})
        self.spawn_seconds = spawn_seconds
        self.rng = np.random.default_rng(seed)
        self.clock = 0.0
        self.queue: list[tuple[float, int, str, int, Any]] = []  # (time, order, kind, worker, ticket or value)
        self.order = 0  # ties in time resolve in submission order
        self.started = False
        self.next_worker = num_workers
        self.bytes_sent = 0
        self.calls = 0  # messages the driver sent or received (units, results, updates)
        self.worker_cpu_seconds = 0.0  # spent here computing the modeled rewards a worker would compute

    def now(self) -> float:
        return self.clock

    def _push(self, when: float, kind: str, worker: int, payload: Any = None) -> None:
        self.order += 1
        heapq.heappush(self.queue, (when, self.order, kind, worker, payload))

    def start(self) -> None:
        if not self.started:
            self.started = True
            self.idle = deque(range(self.num_workers))

    def submit(self, worker: int, candidate: Member, row_indices: list[int]) -> Any:
        self.bytes_sent += _size(candidate, row_indices)
        self.calls += 1
        spread = float(np.exp(self.rng.normal(0.0, self.jitter))) if self.jitter else 1.0
        seconds = self.unit_seconds * len(row_indices) / self.prompts_per_unit * spread * self.slowdown.get(worker, 1.0)
        finish, ticket = self.clock + seconds, (worker, self.order)
        lost = self.lose_at.get(worker)
        if lost is not None and lost < finish:
            self._push(max(lost, self.clock), "lost", worker, ticket)
        else:
            started = time.process_time()  # the worker's share, not the driver's: kept apart to be subtracted
            value = unit_rewards(modeled_rewards(candidate, row_indices))
            self.worker_cpu_seconds += time.process_time() - started
            self._push(finish, "finished", worker, (ticket, value))
        return ticket

    def poll(self, timeout: float | None) -> list[Event]:
        if not self.queue:
            raise RuntimeError("the simulated pool has nothing in flight")
        if timeout is not None and self.queue[0][0] > self.clock + timeout:
            self.clock += timeout
            return []
        self.clock = max(self.clock, self.queue[0][0])
        events = []
        while self.queue and self.queue[0][0] <= self.clock:
            events.append(self._event(*heapq.heappop(self.queue)[2:]))
        return events

    def _event(self, kind: str, worker: int, payload: Any) -> Event:
        if kind == "joined":
            return Event("joined", worker)
        if kind == "lost":  # a fresh worker takes the lost one's place after its start-up time
            self.lose_at.pop(worker, None)
            self._push(self.clock + self.spawn_seconds, "joined", self._fresh_worker())
            return Event("lost", worker, payload)
        ticket, value = payload
        self.calls += 1
        self.bytes_sent += _size(value)
        return Event("finished", worker, ticket, value)

    def _fresh_worker(self) -> int:
        self.next_worker += 1
        return self.next_worker - 1

    def sync(self, update: Update) -> None:
        """Every worker gets the update (seeds and coefficients), serialized once per worker as one call per
        actor is."""
        self.bytes_sent += sum(_size(update) for _ in range(self.num_workers))
        self.calls += self.num_workers


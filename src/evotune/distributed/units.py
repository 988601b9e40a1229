"""Work units smaller than a candidate, handed to whichever worker is free, re-sent when late.

A unit is (candidate, shard of the iteration's prompts), so a pool with more workers than candidates
stays busy (64 workers, population 30, 32 prompts: 3 shards per candidate). A unit answers with its
samples' rewards (one float each, NaN where skipped: a fixed size, whatever the values), and a candidate's
mean reward is the exactly rounded sum of all its scored samples (math.fsum) over their count: the same
number, bit for bit, however its prompts were split and in whatever order the shards came back. The
in-process evaluator scores through the same `combine`, so every evaluator gives the same rewards.

`UnitEvaluator` is the driver's loop over a transport: it owns what to send where and when (pending
units, free workers, the straggler deadline, first result wins); a subclass owns how (Ray actors in
`ray/pool.py`; a simulated pool on a virtual clock in `simulated.py`, which bench/ray_cluster/ measures with).
A unit not back after `straggler_factor` times the
median unit time is sent again to a free worker, and whichever copy finishes first is taken: units are
deterministic (greedy decoding of the same weights and prompts), so the outcome does not depend on which.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..types import Member, Population
from .base import Evaluator

UnitRewards = list  # list[float]: one reward per prompt of the unit, NaN where every function skipped it


def unit_rewards(per_sample: np.ndarray) -> UnitRewards:
    return [float(value) for value in per_sample]


def combine(parts: list[UnitRewards]) -> float:
    """Mean reward of a candidate's shards: fsum is exactly rounded (no order or grouping changes it), then one
    division; NaN when nothing was scored."""
    scored = [value for part in parts for value in part if not math.isnan(value)]
    if not scored:
        return float("nan")
    try:
        return math.fsum(scored) / len(scored)
    except OverflowError:
        # the exact sum is past float64: an infinite mean, which the strategy's tell() then refuses with the
        # candidate named (fsum raises where a plain sum would return inf)
        with np.errstate(over="ignore"):
            return float(np.sum(scored)) / len(scored)


def shard_bounds(num_rows: int, shards: int) -> list[tuple[int, int]]:
    """(start, stop) of `shards` contiguous, near-equal slices of `num_rows` prompts (none empty)."""
    shards = max(1, min(shards, num_rows))
    edges = [round(k * num_rows / shards) for k in range(shards + 1)]
    return list(zip(edges[:-1], edges[1:]))


def auto_shards(workers: int, population: int, num_rows: int) -> int:
    """Enough shards per candidate for every worker to hold a unit, at most one prompt per unit."""
    return max(1, min(num_rows, math.ceil(workers / max(population, 1))))


@dataclass(frozen=True)
class Unit:
    candidate: int
    shard: int


@dataclass(frozen=True)
class Event:
    """What a transport reports: a worker `joined` (ready for work), a unit `finished` (with its value),
    or a worker was `lost` with the unit it held."""

    kind: str
    worker: Any
    ticket: Any = None
    value: UnitRewards | None = None


@dataclass
class Dispatch:
    unit: Unit
    worker: Any
    started: float
    round: int


@dataclass
class Round:
    """One evaluate() call: what is still to send, what came back, how many copies of each unit run."""

    number: int
    pending: deque
    remaining: list  # per candidate, shards not answered yet
    results: dict = field(default_factory=dict)  # Unit -> UnitRewards, the first copy back
    copies: dict = field(default_factory=dict)  # Unit -> copies in flight


class UnitEvaluator(Evaluator):
    """evaluate() as units over a pool of workers; subclasses implement the transport methods below."""

    def __init__(self, num_workers: int, shards: int | None = None, straggler_factor: float = 0.0,
                 history: int = 256):
        """shards: per candidate (None: `auto_shards`); straggler_factor: re-send a unit not back after this many
        median unit times (0: never); history: how many recent unit times the median is taken over."""
        self.num_workers = num_workers
        self.shards = shards
        self.straggler_factor = straggler_factor
        self.durations: deque = deque(maxlen=history)
        self.idle: deque = deque()
        self.running: dict[Any, Dispatch] = {}  # ticket -> dispatch; may hold a straggler from an earlier round
        self.rounds = 0
        self.resent = 0  # copies sent after a deadline, over the run
        self.lost = 0  # units whose worker was lost before answering, over the run
        self.done_by: Counter = Counter()  # worker -> units it answered first, over the run

    # --- the transport: how units and updates reach workers ------------------------------------------

    @abstractmethod
    def now(self) -> float:
        """Seconds on the clock unit durations are measured with."""

    @abstractmethod
    def start(self) -> None:
        """Start the workers (once) and put them in `idle`; a worker started later (a replacement) reports a
        `joined` event when it can take work."""

    @abstractmethod
    def submit(self, worker: Any, candidate: Member, row_indices: list[int]) -> Any:
        """Send one unit to `worker`; returns a ticket that a later event names."""

    @abstractmethod
    def poll(self, timeout: float | None) -> list[Event]:
        """Events since the last poll: wait for at least one, or until `timeout` seconds (None: no limit)."""

    # --- the driver's loop ----------------------------------------------------------------------------

    def evaluate(self, candidates: Population, rows: list[dict], row_indices: list[int] | None = None,
                 on_candidate: Callable[[int], None] | None = None) -> np.ndarray:
        """(pop,) rewards: each candidate's exact mean over all its shards."""
        if row_indices is None:
            raise ConfigError("a pool evaluator sends prompt-row indices, not rows: pass row_indices.")
        self.start()
        shards = self.shards or auto_shards(self.num_workers, len(candidates), len(row_indices))
        bounds = shard_bounds(len(row_indices), shards)
        self.rounds += 1
        state = Round(self.rounds, deque(Unit(c, s) for c in range(len(candidates)) for s in range(len(bounds))),
                      remaining=[len(bounds)] * len(candidates))
        while any(state.remaining):
            deadline = self.deadline()  # once per pass: the median moves as units come back
            self._dispatch(state, candidates, row_indices, bounds, deadline)
            for event in self.poll(self._timeout(state, deadline)):
                self._receive(event, state, on_candidate)
        return np.array([combine([state.results[Unit(c, s)] for s in range(len(bounds))])
                         for c in range(len(candidates))])

    def _dispatch(self, state: Round, candidates: Population, row_indices: list[int], bounds: list,
                  deadline: float) -> None:
        """Pending units to free workers; with none pending, late units again (one extra copy each)."""
        while self.idle and (unit := self._next_unit(state, deadline)) is not None:
            worker = self.idle.popleft()
            start, stop = bounds[unit.shard]
            ticket = self.submit(worker, candidates[unit.candidate], row_indices[start:stop])
            self.running[ticket] = Dispatch(unit, worker, self.now(), state.number)
            state.copies[unit] = state.copies.get(unit, 0) + 1

    def _next_unit(self, state: Round, deadline: float) -> Unit | None:
        while state.pending:
            unit = state.pending.popleft()
            if unit not in state.results:
                return unit
        oldest = self._oldest_resendable(state)
        if oldest is not None and oldest.started + deadline <= self.now():  # _timeout's sum: no rounding gap
            self.resent += 1
            return oldest.unit
        return None

    def deadline(self) -> float:
        """Seconds after which a unit counts as late: straggler_factor x the median unit time (inf: off)."""
        if not self.straggler_factor or not self.durations:
            return math.inf
        return self.straggler_factor * float(np.median(self.durations))

    def _oldest_resendable(self, state: Round) -> Dispatch | None:
        """The earliest-sent unit of this round not answered yet and with no second copy running (`running` keeps
        send order, so the scan stops at the first; it skips only copies already answered or doubled)."""
        for dispatch in self.running.values():
            if (dispatch.round == state.number and dispatch.unit not in state.results
                    and state.copies.get(dispatch.unit, 0) < 2):
                return dispatch
        return None

    def _timeout(self, state: Round, deadline: float) -> float | None:
        """How long poll may block: until the next unit turns late, if a free worker could take it."""
        if not self.idle or math.isinf(deadline):
            return None
        oldest = self._oldest_resendable(state)
        return None if oldest is None else max(0.0, oldest.started + deadline - self.now())

    def _receive(self, event: Event, state: Round, on_candidate: Callable | None) -> None:
        if event.kind == "joined":
            self.idle.append(event.worker)
            return
        dispatch = self.running.pop(event.ticket, None) if event.ticket is not None else None
        if event.kind == "lost":  # the transport replaces the worker; its unit goes back if no copy is running
            if event.worker in self.idle:
                self.idle.remove(event.worker)
            if dispatch is not None and dispatch.round == state.number:
                self.lost += 1
                state.copies[dispatch.unit] -= 1
                if dispatch.unit not in state.results and not state.copies[dispatch.unit]:
                    state.pending.appendleft(dispatch.unit)
            return
        self.idle.append(event.worker)
        if dispatch is None or dispatch.round != state.number:
            return  # a straggler's copy from an earlier round: its worker is free again, its answer was taken
        self.durations.append(self.now() - dispatch.started)
        state.copies[dispatch.unit] -= 1
        if dispatch.unit in state.results:
            return  # the other copy won
        state.results[dispatch.unit] = event.value
        self.done_by[event.worker] += 1
        state.remaining[dispatch.unit.candidate] -= 1
        if on_candidate is not None and not state.remaining[dispatch.unit.candidate]:
            on_candidate(dispatch.unit.candidate)

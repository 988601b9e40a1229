"""Where one ES iteration's time goes on the device the GPU check runs on: a profile row per arm.

The throughput rows (check.py) say how far each arm is from plain generation and from the card's limits; this says
what the rest of the iteration is. For one arm, on the check's settings: one warm-up iteration, then

  * phases: one iteration of `Trainer.step` with each of its parts timed, the device synchronized at every part's
    edges (so a part's seconds include the kernels it queued): the strategy's ask and tell, writing candidates
    into the weights (apply, candidate_factors, restore), generate, the reward functions, and the mean's update
    (apply_update, sync); `other` is the iteration's time that no part accounts for;
  * operators: one more iteration under torch.profiler, its top operators by self device time (self CPU time on a
    CPU), and the number of kernel launches, which on a GPU bounds a decoding loop of a small model.

The parts are timed by wrapping the trainer's own objects' methods for the duration of one iteration (the same
calls, in the same order); nothing is replaced.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

# (part of the trainer, method) per phase; a method the object does not have (a space with no candidate_factors)
# is left out. None of them calls another, so no time is counted twice.
PHASES = {"ask": ("strategy", "ask"), "apply": ("space", "apply"), "candidate_factors": ("space", "candidate_factors"),
          "generate": ("backend", "generate"), "generate_population": ("backend", "generate_population"),
          "reward": ("task", "rewards"), "restore": ("space", "restore"), "tell": ("strategy", "tell"),
          "apply_update": ("space", "apply_update"), "sync": ("evaluator", "sync")}
TOP_OPERATORS = 12


class PhaseTimer:
    """Wraps methods of live objects to add up each phase's wall time, the device synchronized at its edges."""

    def __init__(self, synchronize: Callable[[], None]):
        self.synchronize = synchronize
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: Counter[str] = Counter()
        self.wrapped: list[tuple[Any, str]] = []

    def wrap(self, owner: Any, attribute: str, phase: str) -> None:
        original = getattr(owner, attribute)

        def timed(*args: Any, **kwargs: Any) -> Any:
            self.synchronize()
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.synchronize()
                self.seconds[phase] += time.perf_counter() - started
                self.calls[phase] += 1

        setattr(owner, attribute, timed)  # an instance attribute: shadows the method for this object only
        self.wrapped.append((owner, attribute))

    def unwrap(self) -> None:
        for owner, attribute in self.wrapped:
            delattr(owner, attribute)
        self.wrapped.clear()


def timed_phases(trainer: Any, synchronize: Callable[[], None]) -> dict[str, Any]:
    """One iteration of `trainer.step`, each phase timed; `other` is the rest of the iteration."""
    timer = PhaseTimer(synchronize)
    for phase, (part, method) in PHASES.items():
        owner = getattr(trainer, part)
        if hasattr(owner, method):
            timer.wrap(owner, method, phase)
    try:
        synchronize()
        started = time.perf_counter()
        trainer.step()
        synchronize()
        total = time.perf_counter() - started
    finally:
        timer.unwrap()
    seconds = {phase: round(value, 4) for phase, value in sorted(timer.seconds.items(), key=lambda item: -item[1])}
    return {"iteration_seconds": round(total, 4), "phase_seconds": seconds, "phase_calls": dict(timer.calls),
            "other_seconds": round(total - sum(timer.seconds.values()), 4)}


def operator_profile(trainer: Any, cuda: bool) -> dict[str, Any]:
    """One iteration under torch.profiler: the top operators and the kernel launches."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as profiler:
        trainer.step()
        if cuda:
            torch.cuda.synchronize()
    averages = profiler.key_averages()
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    top = sorted(averages, key=lambda event: getattr(event, key), reverse=True)[:TOP_OPERATORS]
    launches = sum(event.count for event in averages if event.key in ("cudaLaunchKernel", "cuLaunchKernel",
                                                                       "cudaLaunchKernelExC"))
    return {"sorted_by": key, "kernel_launches": launches,
            "top_operators": [{"name": event.key, "calls": event.count,
                               "self_cpu_ms": round(event.self_cpu_time_total / 1e3, 2),
                               "self_device_ms": round(getattr(event, "self_device_time_total", 0.0) / 1e3, 2)}
                              for event in top]}


def profile_row(config_values: dict[str, Any], run: Path, name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The profile row of one arm: its phases in one iteration and its top operators in the next."""
    import torch

    from evotune.config import TrainConfig
    from evotune.trainer import Trainer

    cuda = torch.cuda.is_available() and str(config_values.get("device", "")).startswith("cuda")
    synchronize = torch.cuda.synchronize if cuda else (lambda: None)
    trainer = Trainer(TrainConfig(**config_values), run)
    try:
        started = time.perf_counter()
        trainer.step()  # warm-up: the allocator, kernels and any compilation
        synchronize()
        warm_up = time.perf_counter() - started
        phases = timed_phases(trainer, synchronize)
        operators = operator_profile(trainer, cuda)
    finally:
        trainer.backend.close()
    return {"method": name, "settings": overrides, "warm_up_seconds": round(warm_up, 4), **phases, **operators}

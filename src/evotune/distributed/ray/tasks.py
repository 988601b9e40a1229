"""Independent jobs as Ray tasks (`evotune sweep --parallel`: one run per task)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from .connection import connect


def _run_task(function: Callable[[], Any], num_threads: int) -> None:
    import torch

    torch.set_num_threads(num_threads)  # the task's share of the node, not every core
    function()


def run_tasks(functions: list[tuple[str, Callable[[], Any]]], max_parallel: int, num_cpus: float = 1,
              address: str | None = None) -> dict[str, BaseException]:
    """Run independent (name, function) jobs as Ray tasks, at most `max_parallel` at once, each with
    `num_cpus` cores; returns {name: exception} of the jobs that failed (the others' results are their
    side effects, e.g. run directories). Used by `evotune sweep --parallel` for one run per task."""
    ray = connect(address)
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

"""Double-buffered apply: the next member's weights are written on a worker thread while the current
member generates, then swapped in.

A full-parameter apply reads the whole fp32 master and writes every live weight (SmolLM2-135M in
float32: 538 MB each way, ~0.2 s on one CPU core, 6-7% of a 32-prompt x 10-token generate). That is
memory traffic, not arithmetic, so on one core it cannot shrink much; what can change is *when* it
happens. With a second set of weight tensors (one more copy of the live weights in memory), a worker
thread writes member k+1 into the spare set while member k generates, and apply(k+1) only swaps the
tensors behind each Parameter (`param.data`), which costs nothing. Torch releases the GIL inside its
ops, so the worker runs on another core while the main thread generates; with one core it only
time-shares (measured by `python -m bench.speed.overhead --prefetch-arm`).

The weights written are the ones the plain apply writes (the same function fills the spare tensors),
so the bits are identical; restore() is prefetched the same way (the mean copied from the master).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

MEAN = "mean"  # the key of a prefetched restore()


class WeightPrefetcher:
    """One worker thread and one spare tensor per parameter; at most one prefetch in flight.

    parameters: (name, Parameter) pairs whose `.data` is swapped; write(target, name, tensor) fills
    `tensor` (shaped and typed like that parameter) with what `target` (a member, or MEAN) puts there.
    """

    def __init__(self, parameters: list[tuple[str, torch.nn.Parameter]],
                 write: Callable[[Any, str, torch.Tensor], None]):
        self.parameters = parameters
        self.write = write
        self.spare: dict[str, torch.Tensor] = {}  # allocated on the first prefetch
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="evotune-prefetch")
        self.pending: tuple[Any, Future] | None = None

    def start(self, target: Any) -> None:
        """Begin writing `target`'s weights (a member, or MEAN) into the spare tensors."""
        self.settle()
        if not self.spare:
            self.spare = {name: torch.empty_like(param.data) for name, param in self.parameters}

        def work() -> None:
            with torch.no_grad():  # grad mode is per thread
                for name, _ in self.parameters:
                    self.write(target, name, self.spare[name])

        self.pending = (target, self.pool.submit(work))

    def take(self, target: Any) -> bool:
        """Swap the prefetched weights in if they are `target`'s (True); otherwise drop them (False).
        Either way nothing is being written afterwards, and a worker's error is raised here."""
        pending, self.pending = self.pending, None
        if pending is None:
            return False
        written, future = pending
        future.result()
        if written != target:
            return False
        for name, param in self.parameters:
            param.data, self.spare[name] = self.spare[name], param.data
        return True

    def settle(self) -> None:
        """Wait for a prefetch in flight and drop it: call before the master changes."""
        self.take(object())

    def close(self) -> None:
        self.settle()
        self.pool.shutdown(wait=True)

"""Where a GRPO cell's peak memory is reached: its command run in this process, the resident set sampled every 20 ms
and charged to the phase TRL is in (its generate, the scoring of completions, the log-probabilities, the loss, the
backward pass; "outside" for everything else: loading, evaluation, saving). What bench/scaling/README.md's memory
section read to find GRPO's fixed runtime.

    python -m bench.scaling.phases --cache /work/scaling_models --shape narrow-12L --arm grpo_full_accumulation4
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .arms import ARMS, MAX_NEW_TOKENS
from .cell import command_line
from .shapes import SHAPES, build

PHASES = ("_generate", "_generate_and_score_completions", "_get_per_token_logps_and_entropies", "compute_loss",
          "training_step")


class PhasePeaks:
    """The largest resident set seen in each phase (MiB); the innermost phase entered is charged."""

    def __init__(self, interval_s: float = 0.02) -> None:
        import psutil

        self.process, self.interval_s = psutil.Process(), interval_s
        self.stack, self.peaks = ["outside"], {}  # phase names, innermost last; name -> MiB
        self.stopped = threading.Event()

    def sample(self) -> None:
        rss = self.process.memory_info().rss / 2**20
        phase = self.stack[-1]
        self.peaks[phase] = max(self.peaks.get(phase, 0.0), rss)

    def watch(self) -> None:
        while not self.stopped.wait(self.interval_s):
            self.sample()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.stack.append(name)
        try:
            yield
        finally:
            self.sample()  # a phase's last allocation before it returns
            self.stack.pop()

    def wrapped(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name):
                return function(*args, **kwargs)
        return run


def trace(command: list[str], peaks: PhasePeaks) -> None:
    """Run a cell's `command` (cell.command_line's) here, TRL's phases and every
    backward pass wrapped so that `peaks` charges each sample to the phase it fell in."""
    import torch
    from trl import GRPOTrainer

    for name in PHASES:
        setattr(GRPOTrainer, name, peaks.wrapped(name, getattr(GRPOTrainer, name)))
    torch.Tensor.backward = peaks.wrapped("backward", torch.Tensor.backward)
    from evotune.cli.main import main

    sys.argv = ["evotune", *command[command.index("evotune.cli.main") + 1:]]
    watcher = threading.Thread(target=peaks.watch, daemon=True)
    watcher.start()
    try:
        main()
    except SystemExit as stop:
        if stop.code not in (0, None):
            raise
    finally:
        peaks.stopped.set()
        watcher.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, required=True, help="where the shapes' random-weight models are kept")
    parser.add_argument("--shape", choices=sorted(SHAPES), required=True)
    parser.add_argument("--arm", choices=[arm for arm, spec in ARMS.items() if spec["command"] == "grpo"],
                        required=True)
    parser.add_argument("--iterations", type=int, default=2)
    args = parser.parse_args()
    model = build(SHAPES[args.shape], "float32", args.cache, MAX_NEW_TOKENS)
    with tempfile.TemporaryDirectory() as work:
        command = command_line(args.arm, model, "float32", Path(work), 1.0, args.iterations)
        started, peaks = time.perf_counter(), PhasePeaks()
        trace(command, peaks)
    print(f"{args.shape} {args.arm}: {time.perf_counter() - started:.0f} s")
    for name, mib in sorted(peaks.peaks.items(), key=lambda item: -item[1]):
        print(f"  {name:36} {mib:8,.0f} MiB")


if __name__ == "__main__":
    main()

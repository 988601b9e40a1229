"""`evotune doctor --speed`: this machine's time for the quickstart's unit of work, and the quickstart's time to
expect from it.

`evotune train` with no config (the quickstart) spends nearly all its time generating: each of its iterations
generates `batch_size` prompts x `max_new_tokens` tokens under every candidate, and its evaluations generate the
held-out prompts. The probe times that unit once: one greedy generate of the quickstart's first `batch_size` training
prompts, at its `max_new_tokens`, with its model and dtype (`auto`) on every core, after one untimed warm-up, median
of `repeats`. The quickstart's time scales with it, so a machine whose probe takes twice REFERENCE's can expect about
twice REFERENCE's quickstart time.

REFERENCE is the probe and the quickstart's wall time measured one after the other on one machine
(`python -m bench.quickstart.speed_reference`, bench/results/quickstart/speed_reference.json; a test keeps the two
equal).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from .config.train import QUICKSTART, TrainConfig

# The probe and the quickstart's wall time on one machine: bench/results/quickstart/speed_reference.json.
REFERENCE: dict[str, Any] = {"probe_s": 5.795, "quickstart_s": 815.3, "machine": "Intel(R) Xeon(R) Processor",
                             "dtype": "bfloat16", "threads": 2}


def probe(repeats: int = 3, model: str | None = None) -> dict[str, Any]:
    """Seconds of one quickstart generate on this machine (median of `repeats`), with what ran it."""
    import torch

    from .backends.base import resolve_device
    from .builders import build_task, load_backend

    config = TrainConfig(**{**QUICKSTART, **({"model": model} if model else {}), "report_to": []})
    task = build_task(config)
    backend = load_backend(config, resolve_device(config.device))
    prompts = [row["prompt"] for row in task.train_rows[:config.batch_size]]
    backend.generate(prompts, config.max_new_tokens)  # warm-up: kernels chosen, caches allocated
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        backend.generate(prompts, config.max_new_tokens)
        seconds.append(time.perf_counter() - started)
    dtype = getattr(getattr(backend, "model", None), "dtype", None)
    return {"probe_s": round(statistics.median(seconds), 3), "seconds": [round(value, 3) for value in seconds],
            "prompts": len(prompts), "max_new_tokens": config.max_new_tokens, "model": config.model,
            "dtype": str(dtype).removeprefix("torch.") if dtype is not None else config.dtype,
            "threads": torch.get_num_threads()}


def expected_quickstart_seconds(probe_s: float) -> float:
    """The quickstart's wall time to expect on a machine whose probe took `probe_s`."""
    return REFERENCE["quickstart_s"] * probe_s / REFERENCE["probe_s"]


def describe(result: dict[str, Any]) -> str:
    expected = expected_quickstart_seconds(result["probe_s"])
    return (f"speed probe: one quickstart generate ({result['prompts']} prompts x {result['max_new_tokens']} new "
            f"tokens, {result['dtype']}, {result['threads']} threads) took {result['probe_s']:.2f} s (median of "
            f"{len(result['seconds'])}). Expect `evotune train` with no config to take about {expected / 60:.0f} "
            f"minutes here: on an {REFERENCE['machine']} ({REFERENCE['dtype']}, {REFERENCE['threads']} threads) the "
            f"probe took {REFERENCE['probe_s']:.2f} s and the quickstart {REFERENCE['quickstart_s'] / 60:.1f} "
            f"minutes.")

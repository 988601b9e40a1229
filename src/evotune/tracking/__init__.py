"""Run logging: metrics.jsonl, learning-curve plots and peak memory (`tracker`), and the `report_to`
loggers (`loggers`: TensorBoard, W&B, Trackio).

`from evotune.tracking import MetricsLogger` keeps working: names of `tracker` load on first use.
"""

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return getattr(importlib.import_module(f"{__name__}.tracker"), name)
    except AttributeError:
        raise AttributeError(f"module 'evotune.tracking' has no attribute {name!r}") from None

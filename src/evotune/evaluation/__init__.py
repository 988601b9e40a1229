"""Scoring models: held-out evaluation (`evaluate`), the generation budget shared by training and
evaluation (`generation`), retention of the base model's behaviour (`retention`) and model cards
(`model_card`).

`from evotune.evaluation import evaluate_models` keeps working: names of `evaluate` load on first use,
so importing `evotune.evaluation.generation` does not pull in the model builders.
"""

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return getattr(importlib.import_module(f"{__name__}.evaluate"), name)
    except AttributeError:
        raise AttributeError(f"module 'evotune.evaluation' has no attribute {name!r}") from None

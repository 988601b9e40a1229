"""`evotune estimate --method`'s names: the command each runs and the keys that make the method (on the command's
quickstart when no CONFIG is given), read from the one table of methods (config/methods.py)."""

from __future__ import annotations

from typing import Any

from ..config.methods import METHODS as ALL_METHODS

METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    name: (method.command, {"method": name}) for name, method in ALL_METHODS.items()}

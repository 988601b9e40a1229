"""`evotune estimate --method`'s names: the command each runs and the keys that make the method (on the command's
quickstart when no CONFIG is given). Kept apart so that the command line's parser reads them without importing more."""

from __future__ import annotations

from typing import Any

METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "full-es": ("train", {"space": "full"}),
    "lowrank-es": ("train", {"space": "lowrank"}),
    "lora-es": ("train", {"space": "lora"}),
    "essa": ("train", {"space": "svd_lora", "strategy": "cma"}),
    "grpo-lora": ("grpo", {"lora": True}),
    "grpo-full": ("grpo", {"lora": False}),
    "sft": ("sft", {}),
}

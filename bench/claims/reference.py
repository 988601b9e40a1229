"""Spans rendered from the code rather than from a result file, kept in the pages so they read on GitHub too (the
docs hooks render the site's copies): the keys a `--resume` may change."""

from __future__ import annotations

from collections.abc import Callable


def resumable_keys(command: str) -> str:
    """The keys `evotune COMMAND --resume` may change with --set (runs.directory.RESUMABLE_KEYS, those its config
    has), as code spans."""
    from evotune.baselines.grpo import GRPORunConfig
    from evotune.config import TrainConfig
    from evotune.runs.directory import RESUMABLE_KEYS

    fields = (TrainConfig if command == "train" else GRPORunConfig).__dataclass_fields__
    return ", ".join(f"`{key}`" for key in RESUMABLE_KEYS if key in fields)


CLAIMS: dict[str, Callable[[], str]] = {
    "resumable-keys-train": lambda: resumable_keys("train"),
    "resumable-keys-grpo": lambda: resumable_keys("grpo"),
}

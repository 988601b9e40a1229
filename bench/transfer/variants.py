"""The transfer experiments' variants by the folder name each run lives under (experiments.sh's VARIANTS), in words:
the rows of the table on docs/benchmarks/transfer.md."""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "transfer"
# the ES variants' file first (its base row and held-out draw head the table), then grpo-lora's, measured apart
FILES = ("transfer_heldout.json", "transfer_grpo_heldout.json")

LABELS = {
    "quickstart": "the quickstart: lowrank-es, 64 members x 4 prompts",
    "phrasings4": "the quickstart, prompts across 4 phrasings (`task_args: {phrasings: 4}`)",
    "prompts16": "the quickstart, 16 prompts per member (`batch_size: 16`)",
    "es_at_scale_paper": "full-es at the ES at Scale paper's settings (30 members, sigma 1e-3, learning rate 5e-4)",
    "full_es": "full-es at its own defaults (`method: full-es`)",
    "lora_es": "lora-es at its own defaults (`method: lora-es`)",
    "grpo_lora": "grpo-lora's quickstart (`evotune grpo`), the reference",
}


def variant(run: str) -> str:
    """A run's variant: the name of the folder its seed folders sit in (RUNS/VARIANT/seedN)."""
    return Path(run).parent.name


def result_files(results: Path = RESULTS) -> list[dict]:
    """The measured files in FILES order; [] until the ES variants' file exists (the study has not run)."""
    if not (results / FILES[0]).is_file():
        return []
    return [json.loads((results / name).read_text()) for name in FILES if (results / name).is_file()]

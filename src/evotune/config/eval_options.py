"""`evotune eval`'s options: one dataclass holds their defaults and help, and the command's flags are built
from it (add_cli_options), so the two cannot drift."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, get_args

from ..tasks.arithmetic import EVAL_MAX_NEW_TOKENS as ARITHMETIC_BUDGET
from ..tasks.phrasings import TRANSFER_MAX_NEW_TOKENS
from .fields import option
from .train import DtypeName, Quantization

# New tokens per completion for a task that names no evaluation budget of its own (Task.eval_max_new_tokens).
FALLBACK_MAX_NEW_TOKENS = 32


@dataclass
class EvalOptions:
    """How `evotune eval` scores models; the one source of its defaults and help (`cli_options` builds the
    command's flags from these fields)."""

    max_new_tokens: int | None = option(None, "new tokens per completion (default: the task's own evaluation budget, "
                                              "one checked not to cut its answers, e.g. arithmetic's "
                                              f"{ARITHMETIC_BUDGET}; {FALLBACK_MAX_NEW_TOKENS} for a task without one)")
    dtype: DtypeName = option("auto", "weights dtype (auto: bfloat16 where it runs faster than float32: CUDA, CPUs "
                                      "with AMX)")
    device: str = option("auto", "cpu, cuda, cuda:N, or auto (cuda when available)")
    seed: int = option(0, "seeds the held-out split and sampling")
    num_samples: int = option(0, "also sample K completions per prompt: avg@K and pass@K (0: greedy only)")
    temperature: float = option(1.0, "sampling temperature for --num-samples")
    top_p: float = option(1.0, "nucleus sampling for --num-samples")
    kl_reference: str | None = option(None, "also estimate KL(model || MODEL) per token (k3) and plot reward vs KL")
    quantization: Quantization | None = option(None, "base weights: none, int8 or int4 (bitsandbytes, tested on cpu); "
                                                     "default: a run's own (its config.yaml's `quantization` and int4 "
                                                     "keys, for a run directory, its final/ or checkpoint/, or an sft "
                                                     "adapter/), else none")
    transfer: bool = option(True, "also score the task's transfer split where it has one (arithmetic: other "
                                  "wordings, subtraction, one more digit; never in training), at its own budget")
    transfer_max_new_tokens: int | None = option(None, "new tokens per transfer answer (default: the task's own, "
                                                       f"arithmetic's {TRANSFER_MAX_NEW_TOKENS}, never below "
                                                       "--max-new-tokens)")
    chunk_size: int = option(64, "prompts per generate call")
    samples_path: str | None = option(None, "also append (model, prompt, completion, reward) rows to this JSONL")
    plot_path: str | None = option(None, "reward-vs-KL PNG (default: next to --output when --kl-reference is set)")


# EvalOptions fields that `evotune eval` takes as flags of the same name (the paths have flags of their own).
CLI_OPTIONS = ("max_new_tokens", "transfer_max_new_tokens", "dtype", "device", "seed", "num_samples", "temperature",
               "top_p", "kl_reference", "quantization")


def add_cli_options(parser: Any) -> None:
    """`--max-new-tokens`, `--dtype`, ... on an argparse parser, with EvalOptions' defaults and help."""
    for spec in fields(EvalOptions):
        if spec.name not in CLI_OPTIONS:
            continue
        flag = "--" + spec.name.replace("_", "-")
        kind = {"int": int, "int | None": int, "float": float}.get(spec.type)
        choices = {"dtype": get_args(DtypeName), "quantization": get_args(Quantization)}.get(spec.name)
        parser.add_argument(flag, type=kind, default=spec.default, choices=choices, help=spec.metadata["help"],
                            **({"metavar": "K"} if spec.name == "num_samples" else {}),
                            **({"metavar": "MODEL"} if spec.name == "kl_reference" else {}))

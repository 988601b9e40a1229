"""What each strategy, space and backend reads from a TrainConfig and what it refuses: one declaration per part.

The parts themselves (strategies/, spaces/, backends/) load torch, and a config is checked before any of them
is imported (a bad `--set` fails in a fraction of a second, `evotune keys` never loads a model). So each part's
declaration lives here, torch-free, under the name its registry gives the part (tests/config/test_parts.py keeps
the names equal): the keys that only some parts read, with the text that refuses one set on a run whose part
does not read it, and the part's own cross-field checks. TrainConfig runs them for the chosen parts; builders
then only look the parts up.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError


def searched_count(alpha: float, rank: int) -> int:
    """floor(alpha * rank), robust to float error (0.29 * 100 is 28.999999999999996).

    The same function as spaces/svd_lora.py's (a test keeps them equal); here without torch.
    """
    return math.floor(alpha * rank + 1e-9)


def field_defaults(config: Any) -> dict[str, Any]:
    """Every field's default of a config (class or instance); a list's or dict's from its factory."""
    return {field.name: field.default_factory() if field.default is dataclasses.MISSING else field.default
            for field in dataclasses.fields(config)}


def default_of(config: Any, name: str) -> Any:
    """A config field's default."""
    return field_defaults(config)[name]


@dataclass(frozen=True)
class Key:
    """A key that only some parts read. Set (its value neither its default nor one of `unset`: a shared config file
    that spells a default out still loads) on a run whose chosen part does not read it, it is refused: with
    `refusal`, formatted with the config's fields (`{space}`, `{backend}`, ...), or else with a line naming the key,
    the parts that read it and what to set (check_parts)."""

    name: str
    unset: tuple[Any, ...] = ()
    refusal: str | None = None

    def is_set(self, config: Any) -> bool:
        value = getattr(config, self.name)
        return value not in self.unset and value != default_of(config, self.name)


@dataclass(frozen=True)
class PartRules:
    """One part's declaration. reads: the keys (of those only some parts read) that this part reads. checks: its
    own cross-field checks, each a function of the config that raises ConfigError saying what to set."""

    reads: tuple[Key, ...] = ()
    checks: tuple[Callable[[Any], None], ...] = ()


# --- keys that only some parts read ---------------------------------------------------------------------------

ANCHOR_DECAY = Key("anchor_decay", (0,), "`anchor_decay` pulls the mean that `strategy: openes` steps toward the "
                   "start; CMA-ES owns its mean (pycma sets it), so there is nothing to anchor. Set `anchor_decay: 0`, "
                   "or `strategy: openes`.")
ADAPTER = Key("adapter", (None,), "`adapter` applies to the adapter spaces (lora, svd_lora), not to `space: "
              "{space}`; set `space: svd_lora` (or lora), or remove `adapter`.")
QUANTIZATION = Key("quantization", ("none",), "`quantization: {quantization}` keeps the base weights packed in "
                   "bitsandbytes' INT8/INT4 storage, which ES cannot write: `space: {space}` perturbs and updates the "
                   "base weights themselves. Set `space: svd_lora` (ESSA) or lora, which search an fp32 adapter over "
                   "the frozen quantized base, or `quantization: none`.")
PREFETCH_CANDIDATES = Key("prefetch_candidates", (False,), "`prefetch_candidates` writes the next candidate into a "
                          "second copy of a model's weights, which only `space: full` with `backend: hf` has (here "
                          "space {space}, backend {backend}); set `prefetch_candidates: false`.")
SHARED_PREFIX = Key("shared_prefix", (None, False), "`shared_prefix: true` is the hf backend's prefix pass; vLLM "
                    "shares prefixes through its own prefix cache. Remove `shared_prefix`, or set `backend: hf`.")
COMPILE_GENERATION = Key("compile_generation", (None, False), "`compile_generation: true` compiles the hf backend's "
                         "plain decoding loop, which `backend: vllm` (vLLM captures its own graphs) does not use. "
                         "Remove `compile_generation` (or set it false).")
TENSOR_PARALLEL_SIZE = Key("tensor_parallel_size", (1,), "`tensor_parallel_size` is {tensor_parallel_size}; it must "
                           "be at least 1, and above 1 it needs `backend: vllm` (the hf backend runs one model per "
                           "device).")
# refused with check_parts' own line (the key, the parts that read it, what to set)
FRESH_ADAPTER = tuple(Key(name) for name in ("lora_rank", "lora_alpha", "lora_target_modules", "lora_init"))
PERTURBATION_RANK = Key("perturbation_rank")
# which of the model's own weights a full-weight space moves; an adapter space moves its adapter's entries only
WEIGHT_SELECTION = tuple(Key(name) for name in ("parameters", "exclude_parameters"))
SVD = tuple(Key(name) for name in ("singular_value_fraction", "svd_offsets"))
MASTER_DEVICE = Key("master_device")
CMA_DIAGONAL = Key("cma_diagonal")
# what OpenES's ask/tell reads; pycma draws its own Gaussian samples, ranks them itself and owns its step
OPENES = tuple(Key(name) for name in ("learning_rate", "optimizer", "antithetic", "weight_decay", "fitness_shaping",
                                      "noise"))
ENGINE = tuple(Key(name) for name in ("engine_core", "gpu_memory_utilization"))
RAY = tuple(Key(name) for name in ("ray_address", "ray_timeout", "checksum_every", "worker_num_cpus",
                                   "worker_num_gpus", "prompt_shards", "straggler_factor"))


# --- each part's own checks -------------------------------------------------------------------------------------

def cma_searches_a_small_vector(config: Any) -> None:
    if config.space in ("full", "lowrank"):
        raise ConfigError(f"`strategy: cma` searches a small vector (pycma keeps a covariance over it), not all "
                          f"of a model's weights; set `strategy: openes` for `space: {config.space}`.")


def svd_lora_searches_something(config: Any) -> None:
    if config.adapter is None and searched_count(config.singular_value_fraction, config.lora_rank) == 0:
        raise ConfigError(f"`singular_value_fraction` {config.singular_value_fraction} of rank {config.lora_rank} "
                          f"rounds down to 0 singular values per factor: nothing to search. Set it to at least "
                          f"{1 / config.lora_rank:g}, or raise `lora_rank`.")


def full_batches_only_on_hf(config: Any) -> None:
    if config.population_batch_size is None:
        return
    if config.backend != "hf":
        raise ConfigError("`population_batch_size` with `space: full` stacks whole weight copies in the hf "
                          "backend's forward; vLLM evaluates full-rank candidates one at a time. Set "
                          "`backend: hf`, or remove `population_batch_size`.")
    if config.prefetch_candidates:
        raise ConfigError("`prefetch_candidates` writes the next candidate while one generates, and "
                          "`population_batch_size` generates several candidates at once: use one of the two.")


def compiled_decoding_is_plain(config: Any) -> None:
    """`compile_generation` compiles the hf backend's one-candidate decoding loop, which some settings replace."""
    if not config.compile_generation:
        return
    blocked = [(config.quantization != "none", "an INT8/INT4 base (bitsandbytes layers do not compile)"),
               (bool(config.shared_prefix), "`shared_prefix: true` (its prefix cache is not a static cache)"),
               (config.population_batch_size is not None or config.space == "lowrank",
                "a population-batched forward (`population_batch_size`, `space: lowrank`)")]
    for applies, what in blocked:
        if applies:
            raise ConfigError(f"`compile_generation: true` compiles the hf backend's plain decoding loop, "
                              f"which {what} does not use. Remove `compile_generation` (or set it false).")


def engine_updates_are_stateless(config: Any) -> None:
    if config.space in ("full", "lowrank") and config.optimizer != "sgd":
        raise ConfigError(f"`backend: vllm` with `space: {config.space}` perturbs the engine's own weights and "
                          "updates them with the stateless `optimizer: sgd`; set it, or use `backend: hf` for Adam.")


def engine_quantizes_in_four_bits(config: Any) -> None:
    if config.quantization == "int8":
        raise ConfigError("`quantization: int8` has no in-flight form in vLLM (its bitsandbytes loader is 4-bit "
                          "only): set `quantization: int4`, `backend: hf`, or a pre-quantized INT8 `model`.")


# --- the declarations, under their registries' names ------------------------------------------------------------

STRATEGY_RULES = {"openes": PartRules(reads=(ANCHOR_DECAY, *OPENES)),
                  "cma": PartRules(reads=(CMA_DIAGONAL,), checks=(cma_searches_a_small_vector,))}
SPACE_RULES = {"full": PartRules(reads=(PREFETCH_CANDIDATES, MASTER_DEVICE, *WEIGHT_SELECTION),
                                 checks=(full_batches_only_on_hf,)),
               "lowrank": PartRules(reads=(PERTURBATION_RANK, MASTER_DEVICE, *WEIGHT_SELECTION)),
               "lora": PartRules(reads=(ADAPTER, QUANTIZATION, *FRESH_ADAPTER)),
               "svd_lora": PartRules(reads=(ADAPTER, QUANTIZATION, *FRESH_ADAPTER, *SVD),
                                     checks=(svd_lora_searches_something,))}
BACKEND_RULES = {"hf": PartRules(reads=(PREFETCH_CANDIDATES, SHARED_PREFIX, COMPILE_GENERATION),
                                 checks=(compiled_decoding_is_plain,)),
                 "vllm": PartRules(reads=(TENSOR_PARALLEL_SIZE, *ENGINE),
                                   checks=(engine_updates_are_stateless, engine_quantizes_in_four_bits))}
DISTRIBUTED_RULES = {"local": PartRules(), "ray": PartRules(reads=RAY)}
PART_RULES = {"strategy": STRATEGY_RULES, "space": SPACE_RULES, "backend": BACKEND_RULES,
              "distributed": DISTRIBUTED_RULES}

# the spaces that evolve a PEFT LoRA adapter over a frozen base: those that read `adapter`
ADAPTER_SPACES = tuple(name for name, rules in SPACE_RULES.items() if ADAPTER in rules.reads)


def declared(kind: str) -> list[Key]:
    """The keys some part of a kind reads (each once, in declaration order): those the others refuse."""
    return list(dict.fromkeys(key for rules in PART_RULES[kind].values() for key in rules.reads))


def readers(kind: str, key: Key) -> list[str]:
    """The parts of a kind that read a key, in their registry's order."""
    return [name for name, rules in PART_RULES[kind].items() if key in rules.reads]


def refusal(kind: str, key: Key, config: Any) -> str:
    """The line that refuses `key` set on a run whose `kind` does not read it."""
    if key.refusal is not None:
        return key.refusal.format(**vars(config))
    names = readers(kind, key)
    parts = " and ".join(f"`{kind}: {name}`" for name in names)
    return (f"`{key.name}` is {getattr(config, key.name)!r}, but only {parts} read{'s' if len(names) == 1 else ''} "
            f"it, and this run has `{kind}: {getattr(config, kind)}`: remove `{key.name}` (its default is "
            f"{default_of(config, key.name)!r}), or set `{kind}: {names[0]}`.")


def without_unread_keys(values: dict[str, Any], config_class: type) -> dict[str, Any]:
    """`values` with every key the chosen parts do not read back at its default: a config moved to other parts (a
    run replayed on the hf backend in one process) keeps only what they read, as check_parts requires."""
    defaults = field_defaults(config_class)
    cleaned = dict(values)
    for kind, registry in PART_RULES.items():
        if kind not in defaults:  # a config without that kind of part (grpo's, sft's)
            continue
        name = cleaned.get(kind, defaults[kind])
        if not isinstance(name, str) or name not in registry:  # an unknown part: the config's own check names it
            continue
        chosen = registry[name]
        for key in declared(kind):
            if key not in chosen.reads and key.name in defaults:
                cleaned[key.name] = defaults[key.name]
    return cleaned


def base_for_parts(base: dict[str, Any], overrides: dict[str, Any], config_class: type) -> dict[str, Any]:
    """A base set of keys (a preset, the doctor's short run) for the parts `overrides` choose: each base key that the
    chosen parts do not read is dropped, then the overrides apply as given (a key set there on purpose is kept, and
    refused if the parts ignore it)."""
    kept = without_unread_keys({**base, **overrides}, config_class)
    return {**{key: value for key, value in base.items() if kept[key] == value}, **overrides}


def check_parts(config: Any) -> None:
    """For the run's strategy, space, backend and distributed mode in turn: a key that other parts read but the
    chosen one does not, when set, is refused with its own text; then the chosen part's checks run."""
    for kind, registry in PART_RULES.items():
        chosen = registry[getattr(config, kind)]
        for key in declared(kind):
            if key not in chosen.reads and key.is_set(config):
                raise ConfigError(refusal(kind, key, config))
        for check in chosen.checks:
            check(config)

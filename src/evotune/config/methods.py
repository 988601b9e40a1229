"""The methods evotune runs, one name each, and each method's own defaults with where each value comes from.

A method is a command plus the keys that make it (lowrank-es is `evotune train` with `space: lowrank`). A config
names it with `method:` or lets the making keys imply it; either way the keys the config leaves out take that
method's defaults, never another method's. Each default records its source: the method's paper where its setting
carries to the built-in model (SmolLM2-135M-Instruct), else the method study's choice (bench/method_matrix/: every
method tuned with the same budget on a validation split, then scored on held-out questions), with the measurement
that shows why. `evotune keys --method NAME` prints them.

This module imports nothing but errors: the command line's parser reads the names without importing more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConfigError

MethodName = Literal["full-es", "lowrank-es", "lora-es", "essa", "mezo", "grpo-lora", "grpo-full", "sft"]

ES_AT_SCALE = "ES at Scale (Qiu et al. 2025, arXiv 2509.24372)"
EGGROLL = "EGGROLL (Sarkar et al. 2025, arXiv 2511.16652)"
MEZO = "MeZO (Malladi et al. 2023, arXiv 2305.17333)"


def study(arm: str, why: str = "") -> str:
    """The method study's chosen setting for `arm` on 2-digit addition, and why it replaces the paper's, if it does."""
    where = f"the method study's choice (bench/results/method_matrix/tune/arithmetic/{arm}/)"
    return f"{where}: {why}" if why else where


# the paper's sigma 1e-3 and learning rate 5e-4 moved SmolLM2-135M's held-out accuracy 7.8% -> 8.6% in 8 iterations
# (n = 128, bench/results/learning/learning_sweep_arith_s1e-3_lr5e-4.json), within noise; the study's grid began
# at twice the sigma
FULL_ES_WHY = ("the paper's sigma 1e-3 / learning rate 5e-4 moved the built-in model 7.8% -> 8.6% in 8 iterations "
               "(bench/results/learning/learning_sweep_arith_s1e-3_lr5e-4.json)")


@dataclass(frozen=True)
class Default:
    value: Any
    source: str


@dataclass(frozen=True)
class Method:
    """One method: the command that runs it, the keys that make it, and its defaults (key -> Default)."""

    name: str
    command: Literal["train", "grpo", "sft"]
    summary: str
    makes: dict[str, Any]
    defaults: dict[str, Default] = field(default_factory=dict)

    def values(self) -> dict[str, Any]:
        """The keys that make the method, then its defaults, as config values."""
        return {**self.makes, **{key: default.value for key, default in self.defaults.items()}}


def _es(arm: str, population: int, batch: int, sigma: float, rate: float, why: str = "") -> dict[str, Default]:
    rate_why = "tuned with sigma" if why else ""
    return {"population_size": Default(population, study(arm)), "batch_size": Default(batch, study(arm)),
            "sigma": Default(sigma, study(arm, why)), "learning_rate": Default(rate, study(arm, rate_why)),
            "antithetic": Default(True, study(arm)), "noise": Default("rademacher", study(arm))}


METHODS: dict[str, Method] = {method.name: method for method in (
    Method("full-es", "train", "ES at Scale: every weight, noise regenerated from seeds", {"space": "full"},
           {**_es("full_es", 16, 8, 2e-3, 8e-3, FULL_ES_WHY), "fitness_shaping": Default("z_score", ES_AT_SCALE)}),
    Method("lowrank-es", "train", "EGGROLL: every Linear weight moved by rank-1 members, the population batched",
           {"space": "lowrank"},
           {"perturbation_rank": Default(1, EGGROLL), **_es("lowrank", 64, 4, 2e-3, 1.6e-2),
            "fitness_shaping": Default("z_score", ES_AT_SCALE)}),
    Method("lora-es", "train", "ES over every entry of a LoRA adapter (rank 8 on q/k/v/o)", {"space": "lora"},
           {**_es("es_lora", 16, 8, 1e-2, 4e-2), "fitness_shaping": Default("z_score", ES_AT_SCALE)}),
    Method("essa", "train", "ESSA: CMA-ES over an adapter's singular values (start from an `evotune sft` adapter)",
           {"space": "svd_lora"},
           {"strategy": Default("cma", "ESSA (Korotyshova, Shaposhnikov et al. 2025, arXiv 2507.04453)"),
            "singular_value_fraction": Default(0.5, study("essa")),
            "svd_offsets": Default("absolute", study("essa")), "sigma": Default(0.04, study("essa")),
            "population_size": Default(24, study("essa")), "batch_size": Default(8, study("essa"))}),
    # MeZO's ZO-SGD step, theta += eta * (r(theta + eps z) - r(theta - eps z)) / (2 eps) * z, is OpenES with one
    # antithetic pair, raw rewards and SGD: evotune's step is learning_rate * (r+ - r-) / 2 * z (the pair's seed
    # replays z), so learning_rate = eta / eps. Full-parameter, noise regenerated from the seed, as full-es.
    Method("mezo", "train", "MeZO: zeroth-order SGD, one antithetic pair per step, reward differences used raw",
           {"space": "full"},
           {"population_size": Default(2, f"{MEZO}: one pair (+eps z, -eps z) per step"),
            "antithetic": Default(True, MEZO), "fitness_shaping": Default("none", f"{MEZO}: the raw difference"),
            "noise": Default("gaussian", MEZO), "sigma": Default(1e-3, f"{MEZO}: eps 1e-3"),
            "learning_rate": Default(1e-3, f"{MEZO}: eta 1e-6 (its full-parameter grid: 1e-6, 1e-7) over eps "
                                           "1e-3, since evotune folds 1/eps into the rate"),
            "batch_size": Default(16, f"{MEZO}: 16 examples per step"), "optimizer": Default("sgd", MEZO)}),
    Method("grpo-lora", "grpo", "GRPO (TRL) on a LoRA adapter", {"lora": True},
           {"learning_rate": Default(1e-3, study("grpo_lora", "the largest of 3e-5, 1e-4, 3e-4 and 1e-3")),
            "temperature": Default(0.7, study("grpo_lora")), "beta": Default(0.0, study("grpo_lora")),
            "batch_size": Default(8, study("grpo_lora")), "num_generations": Default(8, study("grpo_lora"))}),
    Method("grpo-full", "grpo", "GRPO (TRL) on every parameter", {"lora": False},
           {"learning_rate": Default(3e-5, study("grpo_full", "1e-5 scored 58.2% against its 60.9% on the "
                                                              "study's validation questions")),
            "temperature": Default(0.7, study("grpo_full")), "beta": Default(0.0, study("grpo_full")),
            "batch_size": Default(8, study("grpo_full")), "num_generations": Default(8, study("grpo_full"))}),
    Method("sft", "sft", "LoRA supervised fine-tuning (ESSA's first stage)", {}),
)}


# `method` values of configs written before it named a method: GRPO's label for `evotune compare` (its default)
LEGACY_NAMES = frozenset({"grpo"})


def infer_method(command: str, values: dict[str, Any]) -> str:
    """The method that `values` (a config's keys) make for `command`: the first whose making keys they hold, the
    command's plain default otherwise (train: full-es, grpo: grpo-lora)."""
    for method in METHODS.values():
        if method.command == command and method.makes and all(values.get(key) == value
                                                              for key, value in method.makes.items()):
            return method.name
    return {"train": "full-es", "grpo": "grpo-lora", "sft": "sft"}[command]


def with_method(command: str, values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the defaults of the method `values` name (`method:`) or make, `values` with `method` set); a key `values`
    give always wins over the defaults. A named method whose making keys the values contradict, or another
    command's, is refused."""
    name = values.get("method")
    named = name is not None and name not in LEGACY_NAMES
    if not named:
        name = infer_method(command, values)
    elif name not in METHODS:
        return {}, values  # the field's own check names the choices
    method = METHODS[name]
    if method.command != command:
        raise ConfigError(f"`method: {name}` is run by `evotune {method.command}`, not `evotune {command}`; run "
                          f"`evotune {method.command}` with this config, or set `method` to one of "
                          f"{', '.join(m.name for m in METHODS.values() if m.command == command)}.")
    for key, value in method.makes.items() if named else ():
        if key in values and values[key] != value:
            others = [m.name for m in METHODS.values() if m.command == command and m.makes.get(key) == values[key]]
            instead = f", or set `method: {others[0]}`" if others else ""
            raise ConfigError(f"`method: {name}` means `{key}: {value}`, but the config sets `{key}: {values[key]}`: "
                              f"remove `{key}`{instead}.")
    return method.values(), {**values, "method": name}


# The keys that choose a method: `method` itself, and those that make one.
CHOOSING_KEYS = frozenset({"method", *(key for method in METHODS.values() for key in method.makes)})


def rebase(base: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """A preset (the quickstart) under a config's keys: when they choose a method themselves (name one, or set a key
    that makes one), the preset's choice goes, so that `--set space=full` runs full-es, not a contradiction."""
    if CHOOSING_KEYS & set(given):
        return {key: value for key, value in base.items() if key not in CHOOSING_KEYS}
    return base


def describe(name: str) -> list[str]:
    """`evotune keys --method NAME`: the method, then each default as `key: value  (source)`."""
    method = METHODS[name]
    made = ", ".join(f"{key}: {value}" for key, value in method.makes.items()) or "its own command"
    lines = [f"{name}: {method.summary}; `evotune {method.command}` with {made}."]
    if not method.defaults:
        lines.append("Its defaults are the command's own (`evotune keys sft`).")
    width = max((len(f"{key}: {default.value!r}") for key, default in method.defaults.items()), default=0)
    for key, default in method.defaults.items():
        lines.append(f"  {f'{key}: {default.value!r}':<{width}}  {default.source}")
    return lines

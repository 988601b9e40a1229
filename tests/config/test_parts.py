"""config/parts.py: each strategy, space and backend declares the keys it reads and its own checks; TrainConfig
refuses a key that only other parts read, with that key's text, and runs the chosen parts' checks only."""

from __future__ import annotations

from typing import get_args

import pytest

from evotune.config import TrainConfig
from evotune.config.parts import (
    ADAPTER_SPACES,
    BACKEND_RULES,
    DISTRIBUTED_RULES,
    PART_RULES,
    SPACE_RULES,
    STRATEGY_RULES,
    Key,
    refusal,
)
from evotune.config.train import DistributedName
from evotune.errors import ConfigError

# a value that counts as set (valid, and not the default), per key that only some parts read
SET_VALUES = {"anchor_decay": 1.0, "adapter": "an/adapter", "quantization": "int4", "prefetch_candidates": True,
              "shared_prefix": True, "compile_generation": True, "tensor_parallel_size": 2,
              "learning_rate": 1e-3, "optimizer": "adam", "antithetic": True, "weight_decay": 0.1,
              "fitness_shaping": "centered_rank", "noise": "rademacher", "cma_diagonal": True, "master_device": "host",
              "perturbation_rank": 2, "lora_rank": 4, "lora_alpha": 8.0, "lora_target_modules": ["q_proj"],
              "lora_init": "gaussian", "singular_value_fraction": 0.5, "svd_offsets": "relative",
              "engine_core": "in_process", "gpu_memory_utilization": 0.5, "ray_address": "10.0.0.5:6379",
              "ray_timeout": 10.0, "checksum_every": 5, "worker_num_cpus": 2.0, "worker_num_gpus": 1.0,
              "prompt_shards": 2, "straggler_factor": 5.0, "parameters": ["mlp"], "exclude_parameters": ["embed"]}
# the other parts of a run while one kind's part is varied: choices under which nothing else refuses the key
OTHER_PARTS = {"strategy": {"space": "svd_lora", "backend": "hf"},
               "space": {"strategy": "openes", "backend": "hf"},
               "backend": {"strategy": "openes", "space": "full", "optimizer": "sgd"},
               "distributed": {"strategy": "openes", "space": "full", "backend": "hf"}}


def test_each_kind_declares_exactly_its_registrys_parts():
    from evotune.backends.vllm_spaces import SPACES as ENGINE_SPACES
    from evotune.builders import BACKENDS, EVALUATORS
    from evotune.spaces import SPACES
    from evotune.strategies import STRATEGIES

    assert set(STRATEGY_RULES) == set(STRATEGIES)
    assert set(SPACE_RULES) == set(SPACES) == set(ENGINE_SPACES)
    assert set(BACKEND_RULES) == set(BACKENDS)
    assert set(EVALUATORS) == set(get_args(DistributedName)) == set(DISTRIBUTED_RULES)
    assert set(PART_RULES) == {"strategy", "space", "backend", "distributed"}  # each a TrainConfig key naming the part


def test_every_key_only_some_parts_read_has_a_set_value_here():
    declared = {key.name for registry in PART_RULES.values() for rules in registry.values() for key in rules.reads}
    assert declared == set(SET_VALUES)


def refusal_cases():
    for kind, registry in PART_RULES.items():
        keys = dict.fromkeys(key for rules in registry.values() for key in rules.reads)
        for name, rules in registry.items():
            for key in keys:
                yield pytest.param(kind, name, key, key in rules.reads, id=f"{kind}={name}-{key.name}")


@pytest.mark.parametrize("kind, name, key, reads", list(refusal_cases()))
def test_a_key_is_refused_with_its_own_text_exactly_where_the_chosen_part_does_not_read_it(kind, name, key: Key,
                                                                                          reads):
    values = {**OTHER_PARTS[kind], kind: name, key.name: SET_VALUES[key.name]}
    if reads:  # a part that reads the key may still refuse the combination with a check of its own, not this text
        try:
            TrainConfig(**values)
        except ConfigError as error:
            assert f"only `{kind}:" not in str(error) and (key.refusal is None or str(error) != key.refusal.format(
                **{**vars(TrainConfig()), **values}))
        return
    with pytest.raises(ConfigError) as raised:
        TrainConfig(**values)
    unchecked = TrainConfig(**OTHER_PARTS[kind])
    vars(unchecked).update(values)  # the config as refused, to render the expected line
    assert str(raised.value) == refusal(kind, key, unchecked)
    assert f"`{key.name}" in str(raised.value)  # the text names the key
    if key.refusal is None:  # the generic line names the parts that read it and what to set
        readers = [name for name, rules in PART_RULES[kind].items() if key in rules.reads]
        assert readers and all(f"`{kind}: {reader}`" in str(raised.value) for reader in readers)


def test_an_explicit_default_is_never_refused():
    """A shared config file may spell out a default of a key its run's parts do not read: it still loads."""
    for registry in PART_RULES.values():
        for key in dict.fromkeys(key for rules in registry.values() for key in rules.reads):
            assert TrainConfig(**{key.name: getattr(TrainConfig(), key.name)})


def test_a_parts_checks_run_only_when_it_is_chosen():
    # four singular values of a rank-4 adapter at fraction 0.2 round down to none: svd_lora's check, not lora's
    with pytest.raises(ConfigError, match="rounds down to 0"):
        TrainConfig(space="svd_lora", strategy="cma", lora_rank=4, singular_value_fraction=0.2)
    with pytest.raises(ConfigError, match="only `space: svd_lora` reads it"):  # and lora does not read the fraction
        TrainConfig(space="lora", strategy="cma", lora_rank=4, singular_value_fraction=0.2)
    # int8 is refused by the vLLM backend's check, and runs on hf
    with pytest.raises(ConfigError, match="no in-flight form in vLLM"):
        TrainConfig(space="svd_lora", strategy="cma", backend="vllm", quantization="int8")
    assert TrainConfig(space="svd_lora", strategy="cma", quantization="int8").quantization == "int8"


def test_the_adapter_spaces_are_the_spaces_that_read_adapter():
    assert ADAPTER_SPACES == ("lora", "svd_lora")


def test_grpo_without_a_lora_refuses_the_lora_keys_it_would_ignore():
    from evotune.baselines.grpo import GRPORunConfig

    with pytest.raises(ConfigError, match=r"^`lora_rank` is 4, but only a LoRA run reads it, and this run has "
                                          r"`lora: false` \(all parameters\): remove `lora_rank` \(its default is 8\), "
                                          r"or set `lora: true`\.$"):
        GRPORunConfig(lora=False, lora_rank=4)
    for key, value in (("lora_alpha", 32.0), ("lora_target_modules", ["q_proj"])):
        with pytest.raises(ConfigError, match=f"`{key}` is"):
            GRPORunConfig(lora=False, **{key: value})
    assert GRPORunConfig(lora=False, lora_rank=8).lora is False  # the default spelled out still loads
    assert GRPORunConfig(lora=True, lora_rank=4).lora_rank == 4


def test_a_repeated_set_key_is_refused_and_a_miscased_key_gets_its_name():
    from evotune.config.train import load_config

    with pytest.raises(ConfigError, match=r"^--set sigma is given twice \(sigma=1e-3 and sigma=0.002\); keep the one"):
        load_config(None, ["sigma=1e-3", "sigma=0.002"])
    with pytest.raises(ConfigError, match="unknown key `SIGMA`; did you mean `sigma`?"):
        load_config(None, ["SIGMA=1"])


@pytest.mark.parametrize("values, message", [
    ({"num_eval": 0}, r"^`num_eval` is 0; give at least 1 held-out prompt, or null for the task's default\.$"),
    ({"seed": -1}, r"^`seed` is -1; give a whole number from 0 to 4294967295\.$"),
    ({"seed": 2**32}, r"^`seed` is 4294967296; give a whole number"),
    ({"parameters": ["("]}, r"^`parameters` holds '\(', which is not a regular expression \(missing \)"),
    ({"exclude_parameters": ["q_proj", "[a-"]}, r"^`exclude_parameters` holds '\[a-', which is not a regular"),
    ({"log_samples": -1}, r"^`log_samples` is -1; use 0 to turn it off"),
    ({"distributed": "ray", "ray_timeout": 1e300}, r"^`ray_timeout` is 1e\+300; give the seconds .* to 86400"),
])
def test_values_every_command_would_fail_on_later_are_refused_up_front(values, message):
    """Each of these reached a traceback or a misleading error deep in a run (a reward blamed for an empty batch,
    accelerate's seed check, re.error, a timestamp overflow); each now stops the config with one line."""
    from evotune.baselines.grpo import GRPORunConfig
    from evotune.config.sft import SFTConfig

    with pytest.raises(ConfigError, match=message):
        TrainConfig(**values)
    shared = {key: value for key, value in values.items() if key == "seed"}  # SFT's num_eval 0: no evaluation
    for config_class in (GRPORunConfig, SFTConfig) if shared else ():  # the same line from grpo and sft
        with pytest.raises(ConfigError, match=message):
            config_class(**shared)


# each space's modules (its own and those it builds on: svd_lora on lora's AdapterSpace, lowrank on full's)
SPACE_MODULES = {"full": ("spaces/full.py",), "lowrank": ("spaces/lowrank.py", "spaces/full.py"),
                 "lora": ("spaces/lora.py",), "svd_lora": ("spaces/svd_lora.py", "spaces/lora.py")}


def config_reads(*relative: str) -> set[str]:
    """Every `config.<key>` the modules read (ast: attribute reads on a name `config`), TrainConfig keys only."""
    import ast
    from dataclasses import fields
    from pathlib import Path

    import evotune

    keys, found = {field.name for field in fields(TrainConfig)}, set()
    for module in relative:
        tree = ast.parse((Path(evotune.__file__).parent / module).read_text())
        found |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                  and isinstance(node.value, ast.Name) and node.value.id == "config" and node.attr in keys}
    return found


def read_outside(*packages: str) -> set[str]:
    """Keys some module outside `packages` (and config/, which validates them all) reads: not their parts' own."""
    from pathlib import Path

    import evotune

    root = Path(evotune.__file__).parent
    modules = [str(path.relative_to(root)) for path in root.rglob("*.py")
               if not str(path.relative_to(root)).startswith(("config/", *packages))]
    return config_reads(*modules)


# each part's own modules, per kind (a space's include those it builds on: svd_lora on lora's AdapterSpace, lowrank
# on full's; the engine's spaces in backends/vllm_spaces.py read the same keys as spaces/)
PART_MODULES = {
    "space": (SPACE_MODULES, ("spaces/", "backends/vllm_spaces.py")),
    "strategy": ({"openes": ("strategies/openes.py",), "cma": ("strategies/cma.py",)}, ("strategies/",)),
    "backend": ({"hf": ("backends/hf.py",), "vllm": ("backends/vllm.py",)}, ("backends/",)),
}


@pytest.mark.parametrize("kind", sorted(PART_MODULES))
def test_the_declarations_are_derived_from_the_code_that_reads_the_keys(kind):
    """The keys only some parts of a kind read in their own code (every `config.<key>` in a part's modules, minus
    the keys the rest of evotune reads, and minus those every part of the kind reads) are declared for exactly the
    parts whose code reads them (config/parts.py), so a run of another part refuses them instead of recording and
    ignoring them: `parameters` on `space: lora` was accepted, written and ignored. (The distributed kind's parts
    are built in builders.py, whose Ray function reads the Ray keys: test_the_ray_keys_are_what_the_pool_reads.)"""
    modules, packages = PART_MODULES[kind]
    outside = read_outside(*packages)
    reads = {part: config_reads(*files) - outside for part, files in modules.items()}
    own = set().union(*reads.values()) - set.intersection(*reads.values())  # read by some parts, not all
    rules = PART_RULES[kind]
    for part, keys in reads.items():
        declared = {key.name for key in rules[part].reads}
        assert keys & own <= declared, f"{kind} {part} reads {sorted(keys & own - declared)}, undeclared"
    if kind == "space":
        assert {"parameters", "exclude_parameters"} <= own  # the keys of the bug, found by the derivation


def test_the_ray_keys_are_what_the_pool_reads():
    """`distributed: ray`'s declared keys are the ones builders.py's Ray functions read (and no other code)."""
    import ast
    from dataclasses import fields
    from pathlib import Path

    import evotune

    keys = {field.name for field in fields(TrainConfig)}
    tree = ast.parse((Path(evotune.__file__).parent / "builders.py").read_text())
    ray_functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)
                     and node.name in ("ray_evaluator", "replica_num_gpus", "reserve_driver_gpus")]
    read = {node.attr for function in ray_functions for node in ast.walk(function) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == "config" and node.attr in keys}
    declared = {key.name for key in DISTRIBUTED_RULES["ray"].reads}
    assert declared <= read | {"ray_timeout"}, sorted(declared - read)
    assert read & {"ray_address", "checksum_every", "worker_num_cpus", "worker_num_gpus", "prompt_shards",
                   "straggler_factor"} <= declared


def test_parameters_on_an_adapter_space_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"`parameters` is \['mlp'\], but only `space: full` and `space: lowrank`"):
        TrainConfig(space="lora", parameters=["mlp"])

"""config/parts.py: each strategy, space and backend declares the keys it reads and its own checks; TrainConfig
refuses a key that only other parts read, with that key's text, and runs the chosen parts' checks only."""

from __future__ import annotations

from typing import get_args

import pytest

from evotune.config import TrainConfig
from evotune.config.parts import ADAPTER_SPACES, BACKEND_RULES, PART_RULES, SPACE_RULES, STRATEGY_RULES, Key
from evotune.config.train import DistributedName
from evotune.errors import ConfigError

# a value that counts as set, per key that only some parts read
SET_VALUES = {"anchor_decay": 1.0, "adapter": "an/adapter", "quantization": "int4", "prefetch_candidates": True,
              "shared_prefix": True, "compile_generation": True, "tensor_parallel_size": 2}
# the other parts of a run while one kind's part is varied: choices under which nothing else refuses the key
OTHER_PARTS = {"strategy": {"space": "svd_lora", "backend": "hf"},
               "space": {"strategy": "openes", "backend": "hf"},
               "backend": {"strategy": "openes", "space": "full", "optimizer": "sgd"}}


def test_each_kind_declares_exactly_its_registrys_parts():
    from evotune.backends.vllm_spaces import SPACES as ENGINE_SPACES
    from evotune.builders import BACKENDS, EVALUATORS
    from evotune.spaces import SPACES
    from evotune.strategies import STRATEGIES

    assert set(STRATEGY_RULES) == set(STRATEGIES)
    assert set(SPACE_RULES) == set(SPACES) == set(ENGINE_SPACES)
    assert set(BACKEND_RULES) == set(BACKENDS)
    assert set(EVALUATORS) == set(get_args(DistributedName))
    assert set(PART_RULES) == {"strategy", "space", "backend"}  # each a TrainConfig key naming the part


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
            assert str(error) != key.refusal.format(**{**vars(TrainConfig()), **values})
        return
    with pytest.raises(ConfigError) as raised:
        TrainConfig(**values)
    assert str(raised.value) == key.refusal.format(**{**vars(TrainConfig(**OTHER_PARTS[kind])), **values})
    assert f"`{key.name}" in str(raised.value)  # the text names the key


def test_a_parts_checks_run_only_when_it_is_chosen():
    # four singular values of a rank-4 adapter at fraction 0.2 round down to none: svd_lora's check, not lora's
    with pytest.raises(ConfigError, match="rounds down to 0"):
        TrainConfig(space="svd_lora", strategy="cma", lora_rank=4, singular_value_fraction=0.2)
    assert TrainConfig(space="lora", strategy="cma", lora_rank=4, singular_value_fraction=0.2).space == "lora"
    # int8 is refused by the vLLM backend's check, and runs on hf
    with pytest.raises(ConfigError, match="no in-flight form in vLLM"):
        TrainConfig(space="svd_lora", strategy="cma", backend="vllm", quantization="int8")
    assert TrainConfig(space="svd_lora", strategy="cma", quantization="int8").quantization == "int8"


def test_the_adapter_spaces_are_the_spaces_that_read_adapter():
    assert ADAPTER_SPACES == ("lora", "svd_lora")

"""`compile_generation`: a static KV cache and a compiled decoding step give eager generation's completions, also
after a candidate's weights were written in place (the compiled step reads the live storage), and the
combinations it cannot serve are refused by name."""

from __future__ import annotations

import pytest

from evotune.backends import HFBackend
from evotune.config import TrainConfig
from evotune.errors import ConfigError
from evotune.spaces import FullParameterSpace
from evotune.strategies import OpenES
from helpers import POPULATION_ROWS as ROWS

PROMPTS = [row["prompt"] for row in ROWS]


# torch.compile (inductor) builds its C++ kernels once: about 15 s for the tiny model on 2 cores
def test_compiled_generation_equals_eager_across_candidates(tiny_model_dir):
    eager = HFBackend.load(tiny_model_dir, dtype="float32")
    compiled = HFBackend.load(tiny_model_dir, dtype="float32", compile_generation=True)
    spaces = [FullParameterSpace(backend.model) for backend in (eager, compiled)]
    members = OpenES(population_size=4, sigma=0.05, seed=3).ask()
    outputs = []
    for backend, space in zip((eager, compiled), spaces):
        texts = [backend.generate(PROMPTS, 8)]
        for member in members:  # weights written in place between generates: the compiled step must see them
            space.apply(member)
            texts.append(backend.generate(PROMPTS, 8))
        space.restore()
        outputs.append(texts)
    assert outputs[0] == outputs[1]
    assert len({tuple(text) for text in outputs[0]}) > 1  # the candidates differ: the comparison can fail


def test_compiled_generation_skips_the_prefix_path(tiny_model_dir):
    backend = HFBackend.load(tiny_model_dir, dtype="float32", compile_generation=True)
    assert backend._prefix_split(tuple(f"same long shared prefix of tokens {i}" for i in range(3))) is None
    assert backend._compiled()["cache_implementation"] == "static"
    assert HFBackend.load(tiny_model_dir, dtype="float32")._compiled() == {}


@pytest.mark.parametrize("overrides, message", [
    ({"backend": "vllm"}, "backend: vllm"),
    ({"shared_prefix": True}, "shared_prefix: true"),
    ({"population_batch_size": 2}, "population-batched"),
    ({"space": "lowrank"}, "population-batched"),
    ({"space": "svd_lora", "strategy": "cma", "quantization": "int8"}, "INT8/INT4"),
])
def test_compile_generation_refused_where_it_cannot_work(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        TrainConfig(compile_generation=True, **overrides)


def test_compile_generation_is_off_by_default():
    assert TrainConfig().compile_generation is None

"""`compile_generation`: a static KV cache and a compiled decoding step give eager generation's completions, also
after a candidate's weights were written in place (the compiled step reads the live storage) and for a batch padded
up to its bucket size (the filler rows dropped), and the
combinations it cannot serve are refused by name."""

from __future__ import annotations

import pytest
import torch
from helpers import POPULATION_ROWS as ROWS

from evotune.backends import HFBackend
from evotune.backends.hf import bucket_rows, pad_rows
from evotune.config import TrainConfig
from evotune.errors import ConfigError
from evotune.spaces import FullParameterSpace
from evotune.strategies import OpenES

PROMPTS = [row["prompt"] for row in ROWS]


# torch.compile (inductor) builds its C++ kernels once: about 15 s for the tiny model on 2 cores
@pytest.mark.engine  # torch.compile's first compile: the engine tier
def test_compiled_generation_equals_eager_across_candidates(tiny_model_dir):
    eager = HFBackend.load(tiny_model_dir, dtype="float32")
    compiled = HFBackend.load(tiny_model_dir, dtype="float32", compile_generation=True)
    spaces = [FullParameterSpace(backend.model) for backend in (eager, compiled)]
    members = OpenES(population_size=4, sigma=0.05, seed=3).ask()
    rows = record_rows(compiled.model)
    outputs = []
    for backend, space in zip((eager, compiled), spaces):
        # 3 prompts: padded up to the 4-row bucket in the compiled backend, the graph of 4 reused, filler dropped
        texts = [backend.generate(PROMPTS, 8), backend.generate(PROMPTS[:3], 8)]
        for member in members:  # weights written in place between generates: the compiled step must see them
            space.apply(member)
            texts.append(backend.generate(PROMPTS, 8))
        space.restore()
        outputs.append(texts)
    assert outputs[0] == outputs[1]
    assert [len(text) for text in outputs[1][:2]] == [4, 3]
    assert rows == [4] * (2 + len(members))  # every compiled generate ran the one 4-row shape
    assert len({tuple(text) for text in outputs[0]}) > 1  # the candidates differ: the comparison can fail


def record_rows(model) -> list[int]:
    """The batch sizes model.generate is called with, from now on."""
    rows, generate = [], model.generate

    def recording(*args, **kwargs):
        rows.append(kwargs["input_ids"].shape[0])
        return generate(*args, **kwargs)
    model.generate = recording
    return rows


@pytest.mark.parametrize("rows, limit, bucket", [(1, None, 1), (3, None, 4), (4, None, 4), (5, None, 8),
                                                 (20, 24, 24), (3, 24, 4), (5, 2, 2)])
def test_bucket_rows(rows, limit, bucket):
    assert bucket_rows(rows, limit) == bucket


def test_padded_rows_repeat_a_real_row():
    batch = {"input_ids": torch.tensor([[0, 5, 6], [7, 8, 9]]), "attention_mask": torch.tensor([[0, 1, 1], [1, 1, 1]])}
    padded = pad_rows(batch, 4)
    assert padded["input_ids"].tolist() == [[0, 5, 6], [7, 8, 9], [0, 5, 6], [0, 5, 6]]
    assert padded["attention_mask"].tolist() == [[0, 1, 1], [1, 1, 1], [0, 1, 1], [0, 1, 1]]
    assert pad_rows(batch, 2) is batch


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

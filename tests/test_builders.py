"""evotune.builders: a config becomes the loop's parts (task, backend, space with its optimizer, strategy,
evaluator), the same way in the driver and in every Ray actor (ReplicaFactory); parameter names and shapes come
from a model's config alone."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import torch
from helpers import read_by_parts

from evotune.backends import HFBackend
from evotune.backends.vllm import adapter_rank
from evotune.backends.vllm_spaces import hf_linear_weight_names, hf_parameter_shapes
from evotune.builders import (
    ReplicaFactory,
    build_evaluator,
    build_space,
    build_strategy,
    build_task,
    on_hf_backend,
    replica_num_gpus,
    reserve_driver_gpus,
)
from evotune.config import TrainConfig
from evotune.distributed import BatchedEvaluator, LocalEvaluator
from evotune.distributed.base import Replica
from evotune.errors import ConfigError
from evotune.files.adapters import read_adapter_config
from evotune.optimizers import SGD, Adam
from evotune.spaces import FullParameterSpace, LowRankSpace
from evotune.spaces.lora import LoRASpace
from evotune.spaces.svd_lora import SVDLoRASpace
from evotune.strategies import CMAES, OpenES


def config(model_dir: str, **overrides) -> TrainConfig:
    values = dict(model=model_dir, task="conciseness", population_size=4, sigma=0.05, learning_rate=0.05,
                  iterations=1, batch_size=2, max_new_tokens=4, num_eval=2, dtype="float32", report_to=[])
    return TrainConfig(**read_by_parts(values, overrides))


def test_parameter_shapes_and_linear_weights_come_from_the_config_alone(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    expected = {name: list(param.shape) for name, param in model.named_parameters()}
    assert hf_parameter_shapes(tiny_model_dir) == expected  # the tied head is the embedding: not listed twice
    linear = hf_linear_weight_names(tiny_model_dir)
    assert set(linear) <= set(expected) and all(len(expected[name]) == 2 for name in linear)
    assert {f"model.layers.{i}.self_attn.{p}_proj.weight" for i in (0, 1) for p in "qkvo"} <= set(linear)
    assert {f"model.layers.{i}.mlp.{p}_proj.weight" for i in (0, 1) for p in ("gate", "up", "down")} <= set(linear)
    assert "model.embed_tokens.weight" not in linear and len(linear) == 14


@pytest.mark.parametrize("space, kind, optimizer", [("full", FullParameterSpace, "adam"),
                                                    ("lowrank", LowRankSpace, "sgd"),
                                                    ("lora", LoRASpace, "sgd"),
                                                    ("svd_lora", SVDLoRASpace, "adam")])
def test_build_space_gives_the_configured_space_and_optimizer(tiny_model_dir, space, kind, optimizer):
    backend = HFBackend.load(tiny_model_dir, "float32", "cpu")
    plain = backend.model
    # svd_lora under openes (essa's own default strategy is cma, which has no learning rate)
    reads = {"lowrank": {"perturbation_rank": 2}, "svd_lora": {"singular_value_fraction": 0.5,
                                                               "strategy": "openes"}}.get(space, {})
    built = build_space(config(tiny_model_dir, space=space, optimizer=optimizer, learning_rate=0.25, **reads),
                        backend)
    assert type(built) is kind
    assert isinstance(built.optimizer, Adam if optimizer == "adam" else SGD)
    assert built.optimizer.learning_rate == 0.25
    if space in ("lora", "svd_lora"):  # adapter spaces: backend.model becomes the PEFT-wrapped model
        from peft import PeftModel

        assert isinstance(backend.model, PeftModel) and any("lora_" in n for n, _ in backend.model.named_parameters())
    else:
        assert backend.model is plain
    if space == "svd_lora":
        assert built.alpha == 0.5
    if space == "lowrank":
        assert built.rank == 2


def test_build_strategy_starts_cma_where_the_space_is(tiny_model_dir):
    backend = HFBackend.load(tiny_model_dir, "float32", "cpu")
    essa = config(tiny_model_dir, space="svd_lora", strategy="cma", sigma=0.5, cma_diagonal=True, seed=3)
    space = build_space(essa, backend)
    strategy = build_strategy(essa, space)
    assert isinstance(strategy, CMAES) and strategy.population_size == 4
    assert np.array_equal(strategy.mean, space.mean_vector()) and strategy.es.sigma == 0.5
    es = config(tiny_model_dir, antithetic=True, fitness_shaping="centered_rank", seed=7)
    openes = build_strategy(es, build_space(es, HFBackend.load(tiny_model_dir, "float32", "cpu")))
    assert isinstance(openes, OpenES) and openes.antithetic and openes.sigma == 0.05
    assert [c.seed for c in openes.ask()] == [c.seed for c in build_strategy(es, None).ask()]  # seeded by config


@pytest.mark.parametrize("space, population_batch_size, expected, batch", [
    ("full", None, LocalEvaluator, None),
    ("full", 3, BatchedEvaluator, 3),  # whole weight copies: batched only when asked
    ("lora", None, LocalEvaluator, None),  # adapter spaces batch candidates only when asked
    ("lora", 2, BatchedEvaluator, 2),
    ("lowrank", None, BatchedEvaluator, 4),  # lowrank: the whole population in one batch by default
    ("lowrank", 1, LocalEvaluator, None),
])
def test_build_evaluator_batches_the_population_where_it_can(tiny_model_dir, space, population_batch_size,
                                                              expected, batch):
    run = config(tiny_model_dir, space=space, population_batch_size=population_batch_size)
    backend = HFBackend.load(tiny_model_dir, "float32", "cpu")
    replica = Replica(build_task(run), backend, build_space(run, backend), run.max_new_tokens)
    evaluator = build_evaluator(run, replica)
    assert type(evaluator) is expected and evaluator.space is replica.space and evaluator.backend is backend
    assert getattr(evaluator, "population_batch_size", None) == batch


def test_replica_factory_pickles_and_builds_the_drivers_replica(tiny_model_dir):
    run = config(tiny_model_dir, space="svd_lora", strategy="cma", lora_rank=4, lora_init="gaussian", seed=2)
    factory = pickle.loads(pickle.dumps(ReplicaFactory(run.to_dict())))  # what Ray sends to an actor
    first, second = factory(), factory()
    assert isinstance(first.space, SVDLoRASpace) and first.max_new_tokens == 4
    assert [row["prompt"] for row in first.task.eval_rows] == [row["prompt"] for row in second.task.eval_rows]
    assert first.space.checksum() == second.space.checksum()  # the same adapter and mean, from the same seed


def test_adapter_rank_reads_a_loaded_adapter_and_a_missing_one_is_named(tiny_model_dir, tmp_path):
    assert adapter_rank(config(tiny_model_dir, space="lora", lora_rank=4)) == 4
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 6, "peft_type": "LORA"}))
    assert adapter_rank(config(tiny_model_dir, space="lora", lora_rank=4, adapter=str(adapter))) == 6
    assert read_adapter_config(str(adapter))["r"] == 6
    with pytest.raises(ConfigError, match="holds no adapter_config.json.*evotune sft"):
        read_adapter_config(str(tmp_path))


def test_on_hf_backend_keeps_the_run_and_drops_the_engine_and_pool(tiny_model_dir):
    vllm_run = config(tiny_model_dir, backend="vllm", optimizer="sgd", distributed="ray", workers=2,
                      tensor_parallel_size=2, worker_num_gpus=1.0, seed=9)
    hf = on_hf_backend(vllm_run)
    assert (hf.backend, hf.distributed, hf.workers, hf.tensor_parallel_size, hf.worker_num_gpus) == (
        "hf", "local", 1, 1, None)
    changed = {"backend", "distributed", "workers", "tensor_parallel_size", "worker_num_gpus"}
    assert {k: v for k, v in hf.to_dict().items() if k not in changed} == {
        k: v for k, v in vllm_run.to_dict().items() if k not in changed}


def test_gpus_per_replica_and_no_reservation_without_ray(tiny_model_dir):
    assert replica_num_gpus(config(tiny_model_dir, distributed="ray", worker_num_gpus=0.5)) == 0.5
    assert replica_num_gpus(config(tiny_model_dir, device="cpu")) == 0.0
    if not torch.cuda.is_available():
        assert replica_num_gpus(config(tiny_model_dir, backend="vllm", optimizer="sgd", tensor_parallel_size=2)) == 0.0
    assert reserve_driver_gpus(config(tiny_model_dir)) == (None, None)  # distributed: local


def test_a_grpo_runs_config_builds_its_task_with_the_rows_train_would_have(tiny_model_dir):
    """bench/quickstart/measure.py reads every run's training questions through build_task, GRPO runs included: a
    GRPO config (no reward timeout of its own: TRL calls the rewards) gives the rows a train config of the same
    task and seed gives."""
    from evotune.builders import build_task
    from evotune.config.grpo import GRPORunConfig

    keys = {"model": tiny_model_dir, "task": "arithmetic", "seed": 5, "num_eval": 4}
    grpo, train = build_task(GRPORunConfig.from_dict(keys)), build_task(TrainConfig.from_dict(keys))
    assert grpo.train_rows == train.train_rows and grpo.eval_rows == train.eval_rows
    assert grpo.reward_timeout is None and train.reward_timeout == TrainConfig().reward_timeout

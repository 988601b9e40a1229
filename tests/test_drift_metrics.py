"""drift/ metrics (spaces/drift.py): each equals a direct computation from the weights, and training logs
them at every evaluation."""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import tiny_config
from transformers import AutoModelForCausalLM

from evotune.optimizers import SGD
from evotune.spaces import FullParameterSpace, LoRASpace, LowRankSpace, SVDLoRASpace, init_lora_adapter
from evotune.spaces.drift import parameter_group
from evotune.spaces.lora import lora_factors
from evotune.trainer import Trainer
from evotune.types import SeedUpdate

UPDATE = SeedUpdate(0, [3, 4], [1.0, -0.5])


def load(model_dir: str, dtype: torch.dtype = torch.bfloat16):
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval()


def test_parameter_groups_of_llama_names():
    assert parameter_group("model.layers.3.self_attn.q_proj.weight") == "attention"
    assert parameter_group("model.layers.3.post_attention_layernorm.weight") == "norms"
    assert parameter_group("model.layers.3.mlp.down_proj.weight") == "mlp"
    assert parameter_group("model.embed_tokens.weight") == "embeddings"
    assert parameter_group("lm_head.weight") == "embeddings"
    assert parameter_group("model.norm.weight") == "norms"
    assert parameter_group("score.bias") == "other"


def test_drift_sums_do_not_depend_on_the_thread_count():
    """A Ray worker runs with fewer threads than the driver; the same weights must give the same drift/ bits
    (a sweep's parallel runs are compared with its sequential ones bit for bit)."""
    from evotune.spaces.drift import weight_drift, weight_sums

    generator = torch.Generator().manual_seed(0)
    base = {f"model.layers.{i}.mlp.up_proj.weight": torch.randn(2048, 2048, generator=generator) for i in range(2)}
    master = {name: value + 1e-3 * torch.randn(value.shape, generator=generator) for name, value in base.items()}
    threads = torch.get_num_threads()
    try:
        records = []
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            records.append(weight_drift(weight_sums(master, base)))
    finally:
        torch.set_num_threads(threads)
    assert records[0]["drift/l2"] > 0 and records[0] == records[1] == records[2]


def test_adapter_drift_sums_do_not_depend_on_the_thread_count():
    """The same for the adapter spaces' sums: ||B A||^2 from Gram matrices and the sums over long vectors (the
    adapter's entries, the adapted modules' base weights)."""
    from evotune.spaces.drift import factor_product_squares, sum_of_squares

    generator = torch.Generator().manual_seed(0)
    left, right = torch.randn(4096, 16, generator=generator), torch.randn(16, 8192, generator=generator)
    vector = torch.randn(3_000_000, generator=generator)
    threads = torch.get_num_threads()
    try:
        values = []
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            values.append((factor_product_squares(left, right), sum_of_squares(vector)))
    finally:
        torch.set_num_threads(threads)
    assert values[0] == values[1] == values[2]
    # and they are the sums they claim, to float64 rounding
    direct = torch.linalg.matrix_norm(left.double() @ right.double()).item() ** 2
    assert values[0][0] == pytest.approx(direct, rel=1e-12)
    assert values[0][1] == pytest.approx(vector.double().square().sum().item(), rel=1e-12)


@pytest.mark.parametrize("space_class", [FullParameterSpace, LowRankSpace])
def test_weight_drift_equals_a_direct_computation(tiny_model_dir, space_class):
    """From the model's bfloat16 weights and an untouched copy of the base: the changed share counts the
    weights whose bfloat16 value moved; the norms come from the fp32 mean."""
    model, untouched = load(tiny_model_dir), load(tiny_model_dir)
    space = space_class(model, optimizer=SGD(1e-3), keep_base=True)
    assert space.drift_metrics()["drift/l2"] == 0.0 and space.drift_metrics()["drift/changed_fraction"] == 0.0
    space.apply_update(UPDATE)
    metrics = space.drift_metrics()

    base = dict(untouched.named_parameters())
    trained = {name: param for name, param in model.named_parameters() if name in space.master}
    difference = {name: space.master[name].double() - base[name].double() for name in trained}
    base_squares = {name: float(base[name].detach().double().square().sum()) for name in trained}
    squares = {name: float(tensor.square().sum()) for name, tensor in difference.items()}
    changed = sum(int((param != base[name]).sum()) for name, param in trained.items())  # as the model holds them
    count = sum(param.numel() for param in trained.values())
    assert metrics["drift/l2"] == pytest.approx(math.sqrt(sum(squares.values())), rel=1e-6)
    assert metrics["drift/relative_l2"] == pytest.approx(math.sqrt(sum(squares.values()) / sum(base_squares.values())),
                                                         rel=1e-6)
    assert metrics["drift/changed_fraction"] == changed / count
    assert 0 < changed < count  # a 1e-3 step flips some bfloat16 weights, not all
    groups = {parameter_group(name) for name in trained}
    assert {key for key in metrics if key.count("/") == 2} == {f"drift/relative_l2/{group}" for group in groups}
    for group in groups:
        names = [name for name in trained if parameter_group(name) == group]
        expected = math.sqrt(sum(squares[n] for n in names) / sum(base_squares[n] for n in names))
        assert metrics[f"drift/relative_l2/{group}"] == pytest.approx(expected, rel=1e-6)
    assert FullParameterSpace(load(tiny_model_dir), optimizer=SGD(1e-3)).drift_metrics() == {}  # no base kept


@pytest.mark.parametrize("space_class", [FullParameterSpace, LowRankSpace])
def test_base_squares_are_computed_once_per_parameter(tiny_model_dir, space_class, monkeypatch):
    """The base never changes, so its sum of squares is read once per parameter however many drift evaluations
    follow; and each evaluation's numbers equal those recomputed from scratch (a plain-dict base, no cache)."""
    from evotune.spaces import drift

    computed: list[int] = []  # id of every base tensor whose squares were summed
    original = drift.base_tensor_squares
    monkeypatch.setattr(drift, "base_tensor_squares",
                        lambda base, device: computed.append(id(base)) or original(base, device))
    space = space_class(load(tiny_model_dir), optimizer=SGD(1e-3), keep_base=True)
    by_evaluation = []
    for seed in range(3):
        space.apply_update(SeedUpdate(0, [seed], [1.0]))
        computed.clear()
        cached = space.drift_metrics()
        by_evaluation.append(sorted(computed))
        assert cached["drift/l2"] > 0
        assert cached == drift.weight_drift(drift.weight_sums(space.master, dict(space.base)))  # bit for bit
    assert by_evaluation == [sorted(id(tensor) for tensor in space.base.values()), [], []]


def merged_deltas(model) -> dict[str, torch.Tensor]:
    """scaling * B @ A per adapted module, dense, float64."""
    deltas = {}
    for name, module in model.named_modules():
        if hasattr(module, "lora_A") and "default" in module.lora_A:
            a, b = module.lora_A["default"].weight.double(), module.lora_B["default"].weight.double()
            deltas[name] = module.scaling["default"] * b @ a
    return deltas


def base_weight_squares(model) -> float:
    return sum(float(module.get_base_layer().weight.double().square().sum())
               for _, module in model.named_modules() if hasattr(module, "lora_A") and "default" in module.lora_A)


@pytest.mark.parametrize("space_class, options", [(LoRASpace, {}), (SVDLoRASpace, {"alpha": 0.5}),
                                                  (SVDLoRASpace, {"alpha": 0.5, "offsets": "relative"})],
                         ids=["lora", "svd_lora", "svd_lora-relative"])
def test_adapter_drift_equals_a_direct_computation(tiny_model_dir, space_class, options):
    """The merged adapter's change against dense B @ A products, the searched quantities' relative change."""
    model = init_lora_adapter(load(tiny_model_dir, torch.float32), rank=4, init="gaussian", seed=1)
    with torch.no_grad():  # a trained-looking B (PEFT's is zero), so singular values and delta W are nonzero
        generator = torch.Generator().manual_seed(5)
        for factor in lora_factors(model):
            if factor.factor == "B":
                factor.weight.copy_(torch.randn(factor.weight.shape, generator=generator) * 0.3)
    space = space_class(model, optimizer=SGD(0.2), **options)
    start_deltas, start_vector = merged_deltas(model), space.mean.clone()
    start_values = space.searched_values(start_vector)
    space.apply_update(UPDATE)
    metrics = space.drift_metrics()

    deltas, base_squares = merged_deltas(model), base_weight_squares(model)
    change = sum(float((deltas[name] - start_deltas[name]).square().sum()) for name in deltas)
    total = sum(float(delta.square().sum()) for delta in deltas.values())
    assert metrics["drift/merged_relative_l2"] == pytest.approx(math.sqrt(change / base_squares), rel=1e-5)
    assert metrics["drift/adapter_relative_l2"] == pytest.approx(math.sqrt(total / base_squares), rel=1e-5)
    assert metrics["drift/l2"] == pytest.approx(float((space.mean - start_vector).double().norm()), rel=1e-6)
    if space_class is LoRASpace:  # the searched entries are the factors themselves
        factors = torch.cat([f.weight.detach().double().reshape(-1) for f in lora_factors(model)])
        expected = float((factors - start_vector.double()).norm() / start_vector.double().norm())
    else:  # the searched singular values, read off the live factors in the frozen singular vectors: U^T W V
        values = torch.cat([torch.diagonal(svd.u.T @ f.weight.detach().double() @ svd.vh.T)[:svd.k]
                            for f, svd in zip(lora_factors(model), space.svds)])
        expected = float((values - start_values).norm() / start_values.norm())
    assert metrics["drift/relative_l2"] == pytest.approx(expected, rel=1e-4)
    assert metrics["drift/merged_relative_l2"] > 0


def records(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("space", ["full", "lora"])
def test_training_logs_drift_at_every_evaluation(tiny_model_dir, tmp_path, space):
    options = {"space": space, "lora_init": "gaussian"} if space == "lora" else {"dtype": "bfloat16"}
    trainer = Trainer(tiny_config(tiny_model_dir, iterations=2, eval_every=1, report_to=[], **options),
                      tmp_path / "run")
    trainer.train()
    logged = records(tmp_path / "run")
    assert [record["iteration"] for record in logged if "drift/l2" in record] == [0, 1, 2]
    assert logged[0]["drift/l2"] == 0.0 and logged[-1]["drift/l2"] > 0
    assert logged[-1]["drift/l2"] == pytest.approx(trainer.space.drift_metrics()["drift/l2"])
    if space == "full":
        assert 0 < logged[-1]["drift/changed_fraction"] <= 1

    quiet = Trainer(tiny_config(tiny_model_dir, iterations=1, eval_every=1, report_to=[], log_drift=False, **options),
                    tmp_path / "quiet")
    quiet.train()
    assert not any(key.startswith("drift/") for record in records(tmp_path / "quiet") for key in record)
    if space == "full":
        assert quiet.space.base is None  # and no copy of the base was made

"""The vllm backend's CPU-testable parts: HF names inside fused engine tensors, and the engine-side
extension driving a module laid out like a vLLM Llama. The engine itself needs CUDA (marked gpu)."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest
import torch

from evotune.backends.models import load_model
from evotune.backends.vllm import EngineWeightsExtension
from evotune.backends.vllm_weights import FUSED, hf_views, split_sizes
from evotune.config import TrainConfig
from evotune.errors import ConfigError
from evotune.spaces import FullParameterSpace
from evotune.strategies.base import Candidate
from evotune.strategies.optimizers import make_optimizer


class FusedLlama(torch.nn.Module):
    """The tiny HF Llama's weights under vLLM's names: q/k/v -> qkv_proj, gate/up -> gate_up_proj."""

    def __init__(self, hf_model: torch.nn.Module):
        super().__init__()
        params = dict(hf_model.named_parameters())
        self.names: dict[str, str] = {}
        for name, param in params.items():
            module, _, leaf = name.rpartition(".")
            prefix, _, projection = module.rpartition(".")
            group = next((key for key, parts in FUSED.items() if projection in parts), None)
            if group is None:
                self._add(name, param.detach().clone())
            elif projection == FUSED[group][0]:
                self._add(f"{prefix}.{group}.{leaf}",
                          torch.cat([params[f"{prefix}.{part}.{leaf}"].detach() for part in FUSED[group]]))

    def _add(self, name: str, tensor: torch.Tensor) -> None:
        key = name.replace(".", "__")
        self.register_parameter(key, torch.nn.Parameter(tensor, requires_grad=False))
        self.names[key] = name

    def named_parameters(self, *args, **kwargs):
        return [(self.names[key], param) for key, param in super().named_parameters(*args, **kwargs)]


@pytest.fixture
def models(tiny_model_dir):
    hf_model, _ = load_model(tiny_model_dir, "bfloat16")
    return hf_model, FusedLlama(hf_model)


def shapes(model) -> dict[str, tuple[int, ...]]:
    return {name: tuple(param.shape) for name, param in model.named_parameters()}


def test_fused_names_map_to_hf_rows(models):
    hf_model, engine = models
    hf_shapes = shapes(hf_model)
    pieces = split_sizes(hf_shapes, "model.layers.0.self_attn.qkv_proj.weight")
    assert [name.split(".")[-2] for name, _ in pieces] == ["q_proj", "k_proj", "v_proj"]
    assert split_sizes(hf_shapes, "model.norm.weight") == [("model.norm.weight", hf_shapes["model.norm.weight"][0])]
    views = dict(hf_views(engine.named_parameters(), hf_shapes))
    assert set(views) == set(hf_shapes)  # every HF tensor, once
    for name, param in hf_model.named_parameters():
        assert torch.equal(views[name], param), name
    with pytest.raises(KeyError, match="no HF counterpart"):
        split_sizes(hf_shapes, "model.layers.0.mystery.weight")


def test_engine_space_perturbs_exactly_like_the_hf_space(models):
    """Same seed: the engine's fused rows hold bit for bit what the HF model's tensors hold; restore
    is exact; an update moves both masters identically."""
    hf_model, engine = models
    hf_space = FullParameterSpace(hf_model, noise_kind="rademacher")
    engine_space = FullParameterSpace(None, noise_kind="rademacher",
                                      named_tensors=hf_views(engine.named_parameters(), shapes(hf_model)))
    before = {name: p.clone() for name, p in engine.named_parameters()}
    for candidate in (Candidate(11, 0.05), Candidate(11, -0.05), Candidate(12, 0.01)):
        hf_space.apply(candidate)
        engine_space.apply(candidate)
        views = dict(hf_views(engine.named_parameters(), shapes(hf_model)))
        for name, param in hf_model.named_parameters():
            assert torch.equal(views[name], param), name
    engine_space.restore()
    assert all(torch.equal(p, before[name]) for name, p in engine.named_parameters())
    for space in (hf_space, engine_space):
        space.update([11, 12], [0.5, -0.25], make_optimizer("sgd", 0.1, 0.0))
    for name, tensor in hf_space.state_tensors().items():
        assert torch.equal(tensor, engine_space.state_tensors()[name]), name


def test_worker_extension_runs_on_an_engine_shaped_module(models):
    """EngineWeightsExtension's methods, as collective_rpc would call them, on a stand-in worker."""
    hf_model, engine = models
    worker = EngineWeightsExtension()
    worker.model_runner = SimpleNamespace(model=engine)
    hf_shapes = {name: list(shape) for name, shape in shapes(hf_model).items()}
    count = worker.evotune_init(hf_shapes, None, None, "gaussian", "sgd", 0.1, 0.0)
    assert count == sum(p.numel() for p in hf_model.parameters())
    before = {name: p.clone() for name, p in engine.named_parameters()}
    worker.evotune_apply(5, 0.1)
    assert any(not torch.equal(p, before[name]) for name, p in engine.named_parameters())
    worker.evotune_restore()
    assert all(torch.equal(p, before[name]) for name, p in engine.named_parameters())
    worker.evotune_update([5], [0.0])  # coefficient 0: nothing moves (learning rate folded in)
    assert all(torch.equal(p, before[name]) for name, p in engine.named_parameters())
    worker.evotune_update([5], [1.0])
    state = worker.evotune_state()
    assert set(state) == set(hf_shapes) and state["model.norm.weight"].dtype == torch.float32
    assert not torch.equal(state["model.layers.0.self_attn.q_proj.weight"],
                           dict(hf_model.named_parameters())["model.layers.0.self_attn.q_proj.weight"].float())


def test_vllm_config_is_checked_before_anything_loads():
    with pytest.raises(ConfigError, match="optimizer: sgd"):
        TrainConfig(backend="vllm", optimizer="adam")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_missing_vllm_is_a_clear_error():
    from evotune.backends.vllm import VLLMBackend

    with pytest.raises(ConfigError, match="pip install vllm"):
        VLLMBackend("smollm2-135m-instruct")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None,
                    reason="needs CUDA and vLLM")
def test_vllm_engine_perturb_restore_and_generate(tiny_model_dir):
    from evotune.backends.vllm import EngineSpace, VLLMBackend
    from evotune.builders import hf_parameter_shapes

    backend = VLLMBackend(tiny_model_dir, dtype="float32", gpu_memory_utilization=0.3)
    space = EngineSpace(backend, hf_parameter_shapes(tiny_model_dir), None, None, "rademacher", "sgd", 0.1, 0.0)
    prompts = ["What is 2 + 2?", "Name a colour."]
    base = backend.generate(prompts, 8)
    space.apply(Candidate(3, 0.5))
    perturbed = backend.generate(prompts, 8)
    space.restore()
    assert backend.generate(prompts, 8) == base and perturbed != base

"""The vllm backend's parts that need no engine: HF names inside fused engine tensors, and the engine-side
extension driving a module laid out like a vLLM Llama. Real engines: test_vllm_engine*.py (CPU or CUDA);
the fp32 master kept on the GPU: the one test here marked gpu."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from helpers import requires_cuda, requires_vllm
from safetensors.torch import save_file

from evotune.backends.engine_state import assemble_ranks
from evotune.backends.models import load_model
from evotune.backends.vllm_weights import FUSED, hf_views, split_sizes
from evotune.backends.vllm_worker import EngineWeightsExtension
from evotune.config import TrainConfig
from evotune.errors import ConfigError
from evotune.import_utils import is_vllm_available
from evotune.optimizers import make_optimizer
from evotune.spaces import FullParameterSpace
from evotune.strategies import Candidate, SeedUpdate


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
        space.optimizer = make_optimizer("sgd", 0.1, 0.0)
        space.apply_update(SeedUpdate(0, [11, 12], [0.5, -0.25]))
    for name, tensor in hf_space.state_tensors().items():
        assert torch.equal(tensor, engine_space.state_tensors()[name]), name


def test_worker_extension_runs_on_an_engine_shaped_module(models, tmp_path):
    """EngineWeightsExtension's methods, as collective_rpc would call them, on a stand-in worker."""
    hf_model, engine = models
    worker = EngineWeightsExtension()
    worker.model_runner = SimpleNamespace(model=engine)
    hf_shapes = {name: list(shape) for name, shape in shapes(hf_model).items()}
    count = worker.evotune_init(hf_shapes, None, None, "gaussian", make_optimizer("sgd", 0.1).describe())
    assert count == sum(p.numel() for p in hf_model.parameters())
    before = {name: p.clone() for name, p in engine.named_parameters()}
    worker.evotune_apply(5, 0.1)
    assert any(not torch.equal(p, before[name]) for name, p in engine.named_parameters())
    worker.evotune_restore()
    assert all(torch.equal(p, before[name]) for name, p in engine.named_parameters())
    worker.evotune_update([5], [0.0])  # coefficient 0: nothing moves (learning rate folded in)
    assert all(torch.equal(p, before[name]) for name, p in engine.named_parameters())
    worker.evotune_update([5], [1.0])
    assert worker.evotune_is_finite() is True and isinstance(worker.evotune_checksum(), str)
    path = worker.evotune_save_state(str(tmp_path))  # state leaves the worker as a file, never as a tensor
    state = assemble_ranks([path])
    assert set(state) == set(hf_shapes) and state["model.norm.weight"].dtype == torch.float32
    assert not torch.equal(state["model.layers.0.self_attn.q_proj.weight"],
                           dict(hf_model.named_parameters())["model.layers.0.self_attn.q_proj.weight"].float())
    moved = worker.evotune_checksum()
    worker.evotune_update([6], [1.0])
    assert worker.evotune_checksum() != moved
    save_file(state, str(tmp_path / "mean.safetensors"))
    worker.evotune_load_state(str(tmp_path / "mean.safetensors"))
    assert worker.evotune_checksum() == moved


def test_vllm_config_is_checked_before_anything_loads():
    with pytest.raises(ConfigError, match="optimizer: sgd"):
        TrainConfig(backend="vllm", optimizer="adam")


@pytest.mark.skipif(is_vllm_available(), reason="vLLM is installed here")
def test_missing_vllm_is_a_clear_error():
    from evotune.backends.vllm import VLLMBackend

    with pytest.raises(ConfigError, match="needs vLLM, which is not installed"):
        VLLMBackend("smollm2-135m-instruct")


@pytest.mark.gpu
@requires_vllm
@requires_cuda
def test_master_on_the_gpu_moves_no_bytes_and_gives_the_same_mean(tmp_path, tiny_model_dir):
    """master_device: device keeps the fp32 master next to the weights (4 bytes per weight of GPU memory):
    apply/restore then move nothing between host and GPU, and an update ends at the host master's mean."""
    from helpers import save_vllm_tiny_model, start_engine, stop_engine

    from evotune.backends.vllm_spaces import EngineSpace, hf_parameter_shapes

    model_dir = save_vllm_tiny_model(str(tmp_path / "model"), tiny_model_dir)
    backend = start_engine(model_dir)
    try:
        shapes = hf_parameter_shapes(model_dir)
        host = EngineSpace(backend, shapes, None, None, "gaussian", make_optimizer("sgd", 0.05), master_device="host")
        assert host.transfer_bytes()["per_candidate"] == 8 * host.num_parameters
        base = host.state_tensors()
        host.apply_update(SeedUpdate(0, [1, 2], [0.5, -0.5]))
        expected = host.state_tensors()
        device = EngineSpace(backend, shapes, None, None, "gaussian", make_optimizer("sgd", 0.05),
                             master_device="device")
        device.load_state_tensors(base)
        assert device.transfer_bytes()["per_candidate"] == 0
        prompts = ["What is 2 + 2?", "Name a colour."]
        before = backend.generate(prompts, 8)
        device.apply(Candidate(3, 0.05))
        device.restore()
        assert backend.generate(prompts, 8) == before
        device.apply_update(SeedUpdate(0, [1, 2], [0.5, -0.5]))
        for name, tensor in device.state_tensors().items():  # both draw the noise where the weights are
            assert torch.equal(tensor, expected[name]), name
    finally:
        stop_engine(backend)

"""evotune.spaces.full: what FullParameterSpace adds to the contract (test_contract.py): chunked noise,
regex selection, fp32 accumulation, no mean vector."""

from __future__ import annotations

import sys

import pytest
import torch

from evotune.errors import ConfigError
from evotune.optimizers import SGD
from evotune.spaces import FullParameterSpace, noise
from evotune.types import Candidate, MeanUpdate, SeedUpdate


@pytest.fixture
def model(model_source):
    """The tiny Llama in bf16, a fresh copy per test."""
    return model_source.base("bfloat16")


def snapshot(model) -> dict[str, torch.Tensor]:
    return {name: param.detach().clone() for name, param in model.named_parameters()}


def assert_unchanged(model, reference):
    for name, param in model.named_parameters():
        assert torch.equal(param.view(torch.uint8), reference[name].view(torch.uint8)), name


def test_update_accumulates_in_fp32(model):
    """A 1e-6 step vanishes in bf16 but must survive in the fp32 mean and add up over steps."""
    space = FullParameterSpace(model)
    name = space.parameters[1][0]
    start = space.master[name].clone()
    for _ in range(3):
        space.optimizer = SGD(learning_rate=1e-6)
        space.apply_update(SeedUpdate(0, [7], [1.0]))
    expected = start + 3 * 1e-6 * noise(start.shape, 7, name)
    assert torch.allclose(space.master[name], expected, atol=1e-7)
    assert not torch.equal(space.master[name], start)


def test_selection_by_regex_leaves_others_untouched(model):
    before = snapshot(model)
    space = FullParameterSpace(model, include=[r"self_attn"], exclude=[r"layers\.1\."])
    assert space.parameters and all("layers.0.self_attn" in name for name, _ in space.parameters)
    space.optimizer = SGD(learning_rate=0.1)
    space.apply_update(SeedUpdate(0, [1], [1.0]))
    for name, param in model.named_parameters():
        changed = not torch.equal(param, before[name])
        assert changed == ("layers.0.self_attn" in name), name


def test_a_selection_of_nothing_is_a_config_error(model):
    with pytest.raises(ConfigError, match="selects no parameter"):
        FullParameterSpace(model, include=[r"no_such_parameter"])


def test_chunked_noise_matches_the_whole_tensor_definition(model, monkeypatch):
    """Tensors larger than a chunk are perturbed piece by piece with the same values noise() defines."""
    monkeypatch.setattr(sys.modules["evotune.spaces.noise"], "CHUNK_SIZE", 64)  # the package's `noise` is the function
    monkeypatch.setattr(sys.modules["evotune.spaces.full"], "CHUNK_SIZE", 64)
    before = snapshot(model)
    space = FullParameterSpace(model)
    space.apply(Candidate(seed=9, scale=0.1))
    for name, param in model.named_parameters():
        expected = (space.master[name] + 0.1 * noise(param.shape, 9, name)).to(param.dtype)
        assert torch.equal(param, expected), name
    space.restore()
    assert_unchanged(model, before)


def test_cma_mean_update_is_refused_with_the_fix(model):
    """No small mean vector: CMA-ES's MeanUpdate is a ConfigError naming `strategy: openes` and vector spaces."""
    with pytest.raises(ConfigError, match="strategy: cma"):
        FullParameterSpace(model).apply_update(MeanUpdate(0, [0.0, 1.0]))


def test_master_device_is_the_host_on_a_cpu_and_a_bad_setting_names_the_choices():
    from evotune.spaces.full import master_device_for

    for setting in ("host", "device", "auto"):
        assert master_device_for(setting, torch.device("cpu"), 10**9) == torch.device("cpu")
    with pytest.raises(ConfigError, match="`master_device` is 'gpu'; set it to one of host, device, auto"):
        master_device_for("gpu", torch.device("cpu"), 10)


def test_a_placed_master_keeps_the_mean_and_state_comes_back_on_the_host(model):
    """place_master moves the fp32 mean (the same values); state_tensors and a checkpoint load stay on the host's
    side of the contract wherever it lives, and the live weights are restored exactly."""
    space = FullParameterSpace(model, optimizer=SGD(learning_rate=1e-3))
    reference = snapshot(model)
    space.apply_update(SeedUpdate(0, [3, 4], [1.0, -0.5]))
    before = {name: tensor.clone() for name, tensor in space.state_tensors().items()}
    space.place_master("cpu")
    assert space.master_device == torch.device("cpu")
    state = space.state_tensors()
    assert all(tensor.device.type == "cpu" and torch.equal(tensor, before[name]) for name, tensor in state.items())
    space.load_state_tensors(before)
    assert all(space.master[name].device == space.master_device for name in space.master)
    assert space.mean_is_finite()
    space.apply(Candidate(5, 0.01))
    space.restore()
    moved = snapshot(model)
    assert any(not torch.equal(moved[name], reference[name]) for name in reference)  # the update is in the weights
    space.load_state_tensors({name: param.to(torch.float32) for name, param in reference.items()})
    assert_unchanged(model, reference)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_master_on_the_gpu_gives_the_host_masters_run(model_source):
    """master_device: device on CUDA: full-es's candidates and update are the host master's, bit for bit (bf16
    weights, rademacher and gaussian noise), and the master never leaves the GPU."""
    from evotune.spaces.full import master_device_for

    for kind in ("rademacher", "gaussian"):
        runs = []
        for setting in ("host", "device"):
            model = model_source.base("bfloat16").to("cuda")
            space = FullParameterSpace(model, noise_kind=kind, optimizer=SGD(learning_rate=1e-3))
            space.place_master(master_device_for(setting, torch.device("cuda"), space.num_parameters))
            assert space.master_device.type == ("cpu" if setting == "host" else "cuda")
            space.apply(Candidate(7, 0.02))
            applied = snapshot(model)
            stacked = space.candidate_factors([Candidate(7, 0.02), Candidate(8, -0.02)])
            space.restore()
            space.apply_update(SeedUpdate(0, [7, 8], [1.0, -1.0]))
            runs.append((applied, [tensor.clone() for tensor in stacked], space.state_tensors(), snapshot(model)))
        for first, second in zip(runs[0], runs[1]):
            pairs = zip(first.values(), second.values()) if isinstance(first, dict) else zip(first, second)
            assert all(torch.equal(a.cpu(), b.cpu()) for a, b in pairs), kind

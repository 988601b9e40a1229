"""Every registered space, built on the tiny model through one parametrized fixture.

As evosax's tests/conftest.py runs its tests over every strategy, the contract tests here run over
every space of `evotune.spaces.SPACES` plus `VectorSpace`. A test that asks for `space_case` is
parametrized over CASES; `@pytest.mark.space_cases("trait", ...)` keeps the cases that have every
named trait:

  model        the space writes a transformers model's parameters
  adapter      it writes only a PEFT LoRA adapter (the base weights never change)
  mean_vector  it has a small mean vector: set_mean, MeanUpdate, CMA-ES points

A space registered in SPACES without an entry in SETUPS still gets a case, whose every test fails
with a message saying to add one (and test_every_registered_space_has_a_case fails too).

This file is also loaded by path in a fresh interpreter (`fresh_process_digests`), so it imports
nothing from the test tree.
"""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

RANK = 8  # LoRA rank of the adapter cases
VECTOR_SIZE = 64  # dimension of the VectorSpace case
FRESH_SEED = 123456789  # the member compared with a fresh interpreter
INPUT_IDS = torch.tensor([[1, 17, 230, 4051, 99, 12]])  # (1, 6) a fixed prompt for logits


@dataclass(frozen=True)
class Setup:
    """How to build one registered space: the model it needs and its constructor options per variant."""

    dtype: str | None  # None: no model (VectorSpace)
    traits: frozenset[str]
    variants: dict[str, dict[str, Any]] = field(default_factory=lambda: {"": {}})


# One entry per name in evotune.spaces.SPACES (full bf16: exactness matters most where rounding is coarse).
SETUPS = {
    "full": Setup("bfloat16", frozenset({"model"})),
    "lora": Setup("float32", frozenset({"model", "adapter", "mean_vector"})),
    "svd_lora": Setup("float32", frozenset({"model", "adapter", "mean_vector"}),
                      {"": {"alpha": 1.0}, "alpha0.5": {"alpha": 0.5},
                       "relative": {"alpha": 0.5, "offsets": "relative"}}),
    "lowrank": Setup("bfloat16", frozenset({"model"})),
}
VECTOR_SETUP = Setup(None, frozenset({"mean_vector"}))


@dataclass(frozen=True)
class SpaceCase:
    id: str  # pytest id: the registered name, "-variant" for further variants
    registered: str  # key of evotune.spaces.SPACES, or "vector" for VectorSpace
    setup: Setup | None  # None: registered without an entry in SETUPS
    options: dict[str, Any]

    @property
    def traits(self) -> frozenset[str]:
        return self.setup.traits if self.setup else frozenset({"model", "adapter", "mean_vector"})


def space_cases() -> list[SpaceCase]:
    from evotune.spaces import SPACES

    cases = []
    for name in SPACES:
        setup = SETUPS.get(name)
        for variant, options in (setup.variants if setup else {"": {}}).items():
            cases.append(SpaceCase(f"{name}-{variant}" if variant else name, name, setup, options))
    return [*cases, SpaceCase("vector", "vector", VECTOR_SETUP, {})]


CASES = space_cases()


# --- models ---------------------------------------------------------------------------------------

class ModelSource:
    """Fresh copies of the tiny model: loaded once per dtype, deep-copied per space (3 ms, not a reload)."""

    def __init__(self, model_dir: str):
        self.model_dir = model_dir
        self._loaded: dict[str, torch.nn.Module] = {}

    def base(self, dtype: str) -> torch.nn.Module:
        if dtype not in self._loaded:  # what HFBackend.load(model_dir, dtype) loads, without the tokenizer
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=getattr(torch, dtype))
            self._loaded[dtype] = model.eval()
        return copy.deepcopy(self._loaded[dtype])

    def lora(self, seed: int = 0, random_b: bool = True, dtype: str = "float32") -> torch.nn.Module:
        """The tiny Llama with a rank-8 adapter; B random (seeded) unless PEFT's zero B is wanted."""
        from evotune.spaces.lora import init_lora_adapter, lora_factors

        model = init_lora_adapter(self.base(dtype), rank=RANK, seed=seed)
        if random_b:
            generator = torch.Generator().manual_seed(1000 + seed)
            with torch.no_grad():
                for factor in lora_factors(model):
                    if factor.factor == "B":
                        factor.weight.copy_(torch.randn(factor.weight.shape, generator=generator) * 0.3)
        return model


# --- a built space and what tests look at ---------------------------------------------------------

def digest_tensors(tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over names and raw bytes, in name order: equal iff bit-identical."""
    digest = hashlib.sha256()
    for name, tensor in sorted(tensors.items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def clone(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in tensors.items()}


@dataclass
class Subject:
    """One built space and its model (None for VectorSpace)."""

    case: SpaceCase
    space: Any
    model: torch.nn.Module | None

    def live(self) -> dict[str, torch.Tensor]:
        """A copy of what a forward pass sees: every model parameter, or VectorSpace's current point."""
        if self.model is None:
            return {"vector": self.space.current.clone()}
        return {name: param.detach().clone() for name, param in self.model.named_parameters()}

    def live_digest(self) -> str:
        return digest_tensors(self.live())

    def mean(self) -> dict[str, torch.Tensor]:
        """A copy of the exact mean (state_tensors() may hand out the space's own tensors)."""
        return clone(self.space.state_tensors())

    def searched(self, name: str) -> bool:
        """Whether live tensor `name` is one the space perturbs (adapter spaces: the LoRA factors only)."""
        if "adapter" in self.case.traits:
            return "lora_" in name
        if self.model is not None:  # full-parameter spaces: their selected parameters
            return name in {selected for selected, _ in self.space.parameters}
        return True

    def mean_vector(self) -> np.ndarray:
        """(d,) float64 copy of a mean_vector space's mean."""
        return self.space.state_tensors()["vector"].numpy().astype(np.float64)

    def score(self) -> float:
        """A reward that depends on the live weights: one logit, or minus the distance to a target."""
        if self.model is None:
            target = torch.linspace(-1.0, 1.0, self.space.current.numel())
            return -float(((self.space.current - target) ** 2).sum())
        with torch.no_grad():
            return float(self.model(input_ids=INPUT_IDS).logits[0, -1, 42])


class SpaceBuilder:
    """What the `space_case` fixture hands a test: builds fresh spaces of one case."""

    def __init__(self, case: SpaceCase, models: ModelSource):
        self.case = case
        self.models = models

    @property
    def traits(self) -> frozenset[str]:
        return self.case.traits

    def build(self, optimizer: Any = "default", start: int = 0) -> Subject:
        """A fresh space on a fresh model. optimizer: an Optimizer, None, or the default SGD(0.05).
        start: another starting point (a nonzero start: another adapter init, other weights, other vector)."""
        from evotune.optimizers import make_optimizer
        from evotune.spaces import SPACES, VectorSpace

        case = self.case
        if case.setup is None:
            pytest.fail(f"space {case.registered!r} is registered in evotune.spaces.SPACES but tests/spaces/"
                        "conftest.py has no SETUPS entry for it: add one, so the space contract runs on it.")
        if isinstance(optimizer, str) and optimizer == "default":
            optimizer = make_optimizer("sgd", 0.05)
        if case.registered == "vector":
            initial = np.linspace(-0.5, 0.5, VECTOR_SIZE) + start
            return Subject(case, VectorSpace(initial, optimizer=optimizer), None)
        if "adapter" in case.traits:
            model = self.models.lora(seed=start, dtype=case.setup.dtype)
        else:
            model = self.models.base(case.setup.dtype)
        space = SPACES[case.registered](model, optimizer=optimizer, **case.options)
        if start and "adapter" not in case.traits:  # other values of the searched weights only
            with torch.no_grad():
                for _, param in space.parameters:
                    param.mul_(1.0 + 0.125 * start)
            space = SPACES[case.registered](model, optimizer=optimizer, **case.options)
        return Subject(case, space, model)


def pytest_configure(config):
    config.addinivalue_line("markers", "space_cases(*traits): run only over the space cases with these traits")


def pytest_generate_tests(metafunc):
    if "space_case" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("space_cases")
        wanted = set(marker.args) if marker else set()
        cases = [case for case in CASES if wanted <= case.traits]
        metafunc.parametrize("space_case", cases, ids=[case.id for case in cases], indirect=True)


@pytest.fixture(scope="session")
def model_source(tiny_model_dir) -> ModelSource:
    return ModelSource(tiny_model_dir)


@pytest.fixture
def space_case(request, model_source) -> SpaceBuilder:
    """THE fixture: one parametrization per space case (see pytest_generate_tests)."""
    return SpaceBuilder(request.param, model_source)


@pytest.fixture
def all_space_cases() -> list[SpaceCase]:
    return CASES


# --- a fresh interpreter --------------------------------------------------------------------------

def fresh_process_report(model_dir: str) -> dict[str, str]:
    """Digests of what a fresh interpreter computes: noise of both kinds, and each space's live
    weights after apply(Candidate(FRESH_SEED, 0.1))."""
    from evotune.spaces import noise
    from evotune.types import Candidate

    report = {f"noise/{kind}": digest_tensors({"": noise((7, 33), FRESH_SEED, "layers.0.weight", kind)})
              for kind in ("gaussian", "rademacher")}
    models = ModelSource(model_dir)
    for case in CASES:
        if case.setup is None:
            continue
        subject = SpaceBuilder(case, models).build()
        subject.space.apply(Candidate(FRESH_SEED, 0.1))
        report[case.id] = subject.live_digest()
    return report


@pytest.fixture(scope="session")
def fresh_process_digests(tiny_model_dir) -> dict[str, str]:
    """fresh_process_report run once, in another interpreter that loads this file by path."""
    # without the collector, and frozen before the exit: its passes over torch's objects would be most of the time
    code = ("import gc, importlib.util, json, sys\n"
            "gc.disable()\n"
            "spec = importlib.util.spec_from_file_location('space_cases', sys.argv[1])\n"
            "module = sys.modules['space_cases'] = importlib.util.module_from_spec(spec)\n"
            "spec.loader.exec_module(module)\n"
            "print(json.dumps(module.fresh_process_report(sys.argv[2])))\n"
            "gc.freeze()\n")
    result = subprocess.run([sys.executable, "-c", code, __file__, tiny_model_dir], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])

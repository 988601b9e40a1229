"""Population-batched LoRA: many adapter candidates share one batched forward / generate.

ESSA (Korotyshova, Shaposhnikov et al., "ESSA: Evolutionary Strategies for Scalable Alignment",
arXiv 2507.04453) evolves only a LoRA adapter, so the candidates of a population differ only in
their small A / B matrices while the expensive base weights are the same for all of them. As
multi-LoRA serving does, the rows of one batch can then carry different adapters: the base
projection runs once over every row, and each candidate's low-rank update is added to its own
rows with a batched matmul. One generate call for P candidates replaces P calls, which turns
P small, overhead-bound decoding loops into one loop with P times the rows.

Row layout is candidate-major: rows [c * group_size : (c + 1) * group_size] belong to
candidate c, so a (pop * group, seq, in) activation is viewed, without a copy, as
(pop, group * seq, in). This holds for the prompt step (seq = prompt length) and for every
KV-cache decoding step (seq = 1) alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from ..errors import ConfigError


def _owners(model: torch.nn.Module) -> dict[int, tuple[torch.nn.Module, str, str]]:
    """id(lora weight) -> (its LoraLayer, adapter name, "A" or "B"), for every LoRA layer in `model`."""
    from peft.tuners.lora import LoraLayer

    owners = {}
    for module in model.modules():
        if isinstance(module, LoraLayer):
            for adapter in module.lora_A:
                owners[id(module.lora_A[adapter].weight)] = (module, adapter, "A")
                owners[id(module.lora_B[adapter].weight)] = (module, adapter, "B")
    return owners


def _check_plain_lora(module: Any, adapter: str) -> None:
    """The batched forward reproduces PEFT's vanilla LoRA path only; refuse anything else loudly."""
    dropout = module.lora_dropout[adapter]
    if module.training and isinstance(dropout, torch.nn.Dropout) and dropout.p > 0:
        raise ConfigError("population-batched generation needs LoRA dropout off: put the model in eval mode "
                          "(model.eval()) or use lora_dropout=0.")
    if module.merged or module.disable_adapters:
        raise ConfigError("population-batched generation needs an active, unmerged LoRA adapter; unmerge it "
                          "(model.unmerge_adapter()) or leave population_batch_size unset.")
    if adapter in module.lora_variant or list(module.active_adapters) != [adapter]:
        raise ConfigError(f"population-batched generation supports one plain LoRA adapter ({adapter!r}) per layer, "
                          "not DoRA or several active adapters; leave population_batch_size unset.")


def _population_forward(module: Any, lora_a: torch.Tensor, lora_b: torch.Tensor, scaling: float,
                        group_size: int) -> Callable[..., torch.Tensor]:
    """A forward for `module` adding candidate c's update B_c A_c x to rows of candidate c only."""
    population = lora_a.shape[0]
    a_transposed = lora_a.transpose(1, 2)  # (pop, in, r)
    b_transposed = lora_b.transpose(1, 2)  # (pop, r, out)

    def forward(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        result = module.base_layer(x, *args, **kwargs)  # (pop * group, seq, out): the shared base, once
        if x.shape[0] != population * group_size:
            raise RuntimeError(f"a batch of {x.shape[0]} rows reached a population-batched LoRA layer built for "
                               f"{population} candidates x {group_size} prompts")
        # Like PEFT: the low-rank path runs in the adapter's dtype (fp32 over a bf16 base).
        rows = x.to(lora_a.dtype).reshape(population, -1, x.shape[-1])  # (pop, group * seq, in), a view
        update = torch.matmul(torch.matmul(rows, a_transposed), b_transposed)  # (pop, group * seq, out)
        return (result + update.view(result.shape) * scaling).to(result.dtype)

    return forward


def _layer_updates(model: torch.nn.Module, factors: Sequence[Any],
                   stacked: Sequence[torch.Tensor]) -> list[tuple[Any, str, torch.Tensor, torch.Tensor]]:
    """[(LoraLayer, adapter, A stack (pop, r, in), B stack (pop, out, r))], one per adapted layer."""
    if len(factors) != len(stacked) or not stacked:
        raise ValueError(f"got {len(stacked)} stacked tensors for {len(factors)} LoRA factors")
    owners = _owners(model)
    per_layer: dict[int, dict[str, Any]] = {}
    for factor, tensor in zip(factors, stacked):
        if id(factor.weight) not in owners:
            raise ConfigError(f"LoRA factor {factor.module}.{factor.factor} is not a weight of this model: build the "
                              "space on the backend's (PEFT-wrapped) model.")
        module, adapter, kind = owners[id(factor.weight)]
        if tensor.shape[1:] != factor.weight.shape or tensor.shape[0] != stacked[0].shape[0]:
            raise ValueError(f"stacked {factor.module}.{factor.factor} has shape {tuple(tensor.shape)}; expected "
                             f"({stacked[0].shape[0]}, *{tuple(factor.weight.shape)})")
        entry = per_layer.setdefault(id(module), {"module": module, "adapter": adapter})
        entry[kind] = tensor
    if any("A" not in entry or "B" not in entry for entry in per_layer.values()):
        raise ValueError("every adapted layer needs both its A and its B stack")
    return [(entry["module"], entry["adapter"], entry["A"], entry["B"]) for entry in per_layer.values()]


@contextmanager
def _patched_forwards(patches: list[tuple[torch.nn.Module, Callable]]) -> Iterator[None]:
    """Replace each module's forward for the block, then restore it exactly (the instance attribute it
    had, or none: the class's forward), even on error."""
    patched: list[tuple[Any, Any]] = []
    try:
        for module, forward in patches:
            patched.append((module, module.__dict__.get("forward")))  # None: the class's forward
            module.forward = forward
        yield
    finally:
        for module, previous in reversed(patched):
            if previous is None:
                del module.forward
            else:
                module.forward = previous


@contextmanager
def population_adapters(model: torch.nn.Module, factors: Sequence[Any], stacked: Sequence[torch.Tensor],
                        group_size: int) -> Iterator[None]:
    """Within the block, batch row r of `model` uses candidate r // group_size's adapter.

    factors: the space's LoRAFactor list; stacked[i]: (pop, *factors[i].weight.shape), e.g. from
    AdapterSpace.candidate_factors. Each LoraLayer's forward is replaced by an instance attribute
    and restored on exit (even on error); the live adapter weights are neither read nor written.
    """
    layers = _layer_updates(model, factors, stacked)
    for module, adapter, _, _ in layers:
        _check_plain_lora(module, adapter)
    with _patched_forwards([(module, _population_forward(module, lora_a, lora_b, module.scaling[adapter], group_size))
                            for module, adapter, lora_a, lora_b in layers]):
        yield


def _linear_updates(model: torch.nn.Module, factors: Sequence[Any],
                    stacked: Sequence[torch.Tensor]) -> list[tuple[torch.nn.Module, torch.Tensor, torch.Tensor]]:
    """[(Linear module, A stack (pop, r, in), B stack (pop, out, r))] from factors naming modules by name."""
    if len(factors) != len(stacked) or not stacked:
        raise ValueError(f"got {len(stacked)} stacked tensors for {len(factors)} low-rank factors")
    per_module: dict[str, dict[str, Any]] = {}
    for factor, tensor in zip(factors, stacked):
        module = model.get_submodule(factor.module)
        if not isinstance(module, torch.nn.Linear):
            raise ConfigError(f"{factor.module} is a {type(module).__name__}, not a torch.nn.Linear: per-row "
                              "low-rank perturbations apply to Linear modules of a plain (non-PEFT) model.")
        if tensor.shape[1:] != tuple(factor.shape) or tensor.shape[0] != stacked[0].shape[0]:
            raise ValueError(f"stacked {factor.module}.{factor.factor} has shape {tuple(tensor.shape)}; expected "
                             f"({stacked[0].shape[0]}, *{tuple(factor.shape)})")
        per_module.setdefault(factor.module, {"module": module})[factor.factor] = tensor
    if any("A" not in entry or "B" not in entry for entry in per_module.values()):
        raise ValueError("every perturbed module needs both its A and its B stack")
    return [(entry["module"], entry["A"], entry["B"]) for entry in per_module.values()]


def _linear_delta_forward(base: Callable[..., torch.Tensor], lora_a: torch.Tensor, lora_b: torch.Tensor,
                          group_size: int) -> Callable[..., torch.Tensor]:
    """A Linear forward whose rows of candidate c get x A_c^T B_c^T added, in the weights' dtype.

    Two batched matmuls per call: (pop, rows, in) @ (pop, in, r), then the (pop, rows, out) base result
    takes (pop, rows, r) @ (pop, r, out) in place (baddbmm_), so no copy of the activations or of the
    output is made. Over bf16 weights the delta is rounded like the base (to 3 significant digits of the
    perturbation itself, finer than writing W + sigma E into bf16 weights, which the dense path does).
    """
    population = lora_a.shape[0]
    a_transposed = lora_a.transpose(1, 2)  # (pop, in, r)
    b_transposed = lora_b.transpose(1, 2)  # (pop, r, out)

    def forward(x: torch.Tensor) -> torch.Tensor:
        result = base(x)  # (pop * group, seq, out): the shared base matmul, once for every row
        if x.shape[0] != population * group_size:
            raise RuntimeError(f"a batch of {x.shape[0]} rows reached a population-batched Linear built for "
                               f"{population} candidates x {group_size} prompts")
        rows = x.reshape(population, -1, x.shape[-1])  # (pop, group * seq, in), a view for contiguous x
        projected = torch.bmm(rows, a_transposed)  # (pop, group * seq, r)
        result.view(population, -1, result.shape[-1]).baddbmm_(projected, b_transposed)
        return result

    return forward


@contextmanager
def population_linear_deltas(model: torch.nn.Module, factors: Sequence[Any], stacked: Sequence[torch.Tensor],
                             group_size: int) -> Iterator[None]:
    """Within the block, batch row r of `model` adds candidate (r // group_size)'s low-rank delta to the
    output of every named Linear module: y = Linear(x) + x A_c^T B_c^T, computed in the weights' dtype.

    For EGGROLL-style populations over a plain model (spaces/lowrank.py; Sarkar et al., arXiv
    2511.16652): factors name modules (`.module`, `.factor` "A" or "B", `.shape`), stacked[i] is
    (pop, *factors[i].shape), A (pop, r, in) and B (pop, out, r) as in LoRA, cast here once to each
    module's weight dtype and device. The base weights are not written; each forward is restored on
    exit, even on error.
    """
    layers = _linear_updates(model, factors, stacked)
    patches = []
    for module, lora_a, lora_b in layers:
        weight = module.weight
        lora_a, lora_b = (tensor.to(weight.device, weight.dtype) for tensor in (lora_a, lora_b))
        # base: the Linear's own forward (bound; hooks still run around the patch), read before any patch
        patches.append((module, _linear_delta_forward(module.forward, lora_a, lora_b, group_size)))
    with _patched_forwards(patches):
        yield

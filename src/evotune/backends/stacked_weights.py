"""Population-batched full-rank candidates: several whole perturbed models share one generate.

ES at Scale (Qiu et al. 2025, arXiv 2509.24372) perturbs every weight, so its candidates share no
base matmul as low-rank members do (backends/multi_lora.py). What they can still share is the
decoding loop: each module that owns a perturbed parameter gets the population's copies of that
parameter stacked, (P, *shape), and maps candidate c's rows through copy c with `torch.func.vmap`
(a Linear becomes one batched matmul, an embedding one batched gather, a norm one broadcast
product). One generate of P x prompts rows then replaces P generates of `prompts` rows: on a GPU,
where a 135M model's decoding step is kernel launches and Python, not arithmetic, that is the
difference between one candidate per second and many.

Row layout is candidate-major, as in multi_lora.py: rows [c * group_size : (c + 1) * group_size] are
candidate c's, for the prompt step and every KV-cache decoding step alike. Memory: P copies of the
perturbed weights in their live dtype (`population_batch_size` bounds P).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import torch

from ..errors import ConfigError
from ..spaces.full import StackedWeight
from .multi_lora import _patched_forwards


def _stacked_forward(module: torch.nn.Module, stacked: dict[str, torch.Tensor], group_size: int) -> Callable:
    """A forward for `module` whose rows of candidate c use the c-th slice of each of its `stacked` parameters."""
    population = next(iter(stacked.values())).shape[0]
    inside = [False]  # functional_call re-enters module.forward (this patch): then run the class's own forward

    def candidate_forward(weights: dict[str, torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(module, weights, (rows,))

    def forward(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if inside[0]:
            return type(module).forward(module, x, *args, **kwargs)
        if args or kwargs:
            raise ConfigError(f"population-batched full-rank generation maps one input per module; "
                              f"{type(module).__name__} got more. Leave `population_batch_size` unset.")
        if x.shape[0] != population * group_size:
            raise RuntimeError(f"a batch of {x.shape[0]} rows reached a population-batched {type(module).__name__} "
                               f"built for {population} candidates x {group_size} prompts")
        rows = x.reshape(population, group_size, *x.shape[1:])  # (pop, group, ...), a view for contiguous x
        inside[0] = True
        try:
            out = torch.func.vmap(candidate_forward)(stacked, rows)  # (pop, group, ..., out)
        finally:
            inside[0] = False
        return out.reshape(population * group_size, *out.shape[2:])

    return forward


def _module_patches(model: torch.nn.Module, factors: Sequence[StackedWeight], stacked: Sequence[torch.Tensor],
                    group_size: int) -> list[tuple[torch.nn.Module, Callable]]:
    if len(factors) != len(stacked) or not stacked:
        raise ValueError(f"got {len(stacked)} stacked tensors for {len(factors)} parameters")
    parameters = dict(model.named_parameters())
    by_id: dict[int, torch.Tensor] = {}
    for factor, tensor in zip(factors, stacked):
        if factor.name not in parameters:
            raise ConfigError(f"{factor.name} is not a parameter of this model: build the space on the backend's "
                              "model.")
        if tuple(tensor.shape[1:]) != tuple(factor.shape) or tensor.shape[0] != stacked[0].shape[0]:
            raise ValueError(f"stacked {factor.name} has shape {tuple(tensor.shape)}; expected "
                             f"({stacked[0].shape[0]}, *{tuple(factor.shape)})")
        by_id[id(parameters[factor.name])] = tensor
    patches = []
    for module in model.modules():  # a tied weight (embedding and LM head) patches both of its modules
        own = {attr: by_id[id(param)] for attr, param in module.named_parameters(recurse=False)
               if id(param) in by_id}
        if own:
            patches.append((module, _stacked_forward(module, own, group_size)))
    return patches


@contextmanager
def population_weights(model: torch.nn.Module, factors: Sequence[StackedWeight], stacked: Sequence[torch.Tensor],
                       group_size: int) -> Iterator[None]:
    """Within the block, batch row r of `model` runs with candidate (r // group_size)'s copy of every parameter
    in `factors` (stacked[i]: (P, *factors[i].shape), in the live dtype and device); the live weights are
    neither read for those parameters nor written. Each patched forward is restored on exit, even on error."""
    with _patched_forwards(_module_patches(model, factors, stacked, group_size)):
        yield

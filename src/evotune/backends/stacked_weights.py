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

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

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


# --- how many candidates go together: `population_batch_size: auto` -----------------------------------------------

# Of the free device memory, the share the stacked copies and their rows' caches may take: the rest is left for
# activations the estimate leaves out (MLP intermediates, attention scratch) and the allocator's fragmentation.
MEMORY_FRACTION = 0.8
# Prompt tokens per row the estimate allows for (prompts are not known when the evaluator is built): ES prompts
# with a chat template are ~50-300 tokens.
PROMPT_TOKENS = 512


def candidates_per_generate(free_bytes: int, candidate_bytes: int, population: int) -> int:
    """Candidates per batched generate for `free_bytes` of device memory when each takes `candidate_bytes`: as many
    as MEMORY_FRACTION of it holds, at most the population, spread evenly over the generates that takes (30 with
    room for 13 -> 3 generates of 10, not 13 + 13 + 4); 1 (one at a time, the unbatched path) where fewer than
    two fit. A pure function, so the rule is tested without a GPU."""
    if candidate_bytes <= 0 or population < 1:
        raise ValueError(f"candidate_bytes {candidate_bytes} and population {population} must be positive")
    fits = min(int(free_bytes * MEMORY_FRACTION) // candidate_bytes, population)
    if fits < 2:
        return 1
    generates = -(-population // fits)  # ceil
    return -(-population // generates)


def candidate_bytes(model: torch.nn.Module, parameters: Sequence[tuple[str, torch.Tensor]], rows: int,
                    tokens: int) -> int:
    """Device memory one more candidate in a batched generate takes: its stacked copy of the perturbed
    `parameters` (live dtype), plus the KV cache of its `rows` rows for `tokens` positions and their float32
    last-position logits (transformers' config names; a model without them counts the weights only)."""
    weights = sum(tensor.numel() * tensor.element_size() for _, tensor in parameters)
    config = getattr(model, "config", None)

    def get(name: str, default: int = 0) -> int:
        return int(getattr(config, name, None) or default)

    heads = get("num_attention_heads", 1)
    head_size = get("head_dim") or get("hidden_size") // heads
    element = next(model.parameters()).element_size()
    cache_per_token = 2 * get("num_hidden_layers") * get("num_key_value_heads", heads) * head_size * element
    logits = get("vocab_size") * 4  # float32, per row
    return weights + rows * (tokens * cache_per_token + logits)


def free_device_bytes(device: torch.device) -> int | None:
    """Free memory of a CUDA device now (torch.cuda.mem_get_info); None elsewhere."""
    return int(torch.cuda.mem_get_info(device)[0]) if device.type == "cuda" else None


def auto_population_batch(model: torch.nn.Module, parameters: Sequence[tuple[str, torch.Tensor]], population: int,
                          rows: int, max_new_tokens: int) -> int:
    """`population_batch_size: auto` for `space: full`: on CUDA, candidates_per_generate from the device's free
    memory now; elsewhere 1, one at a time: on a CPU the batched forward does the same arithmetic at the same speed
    (0.99-1.05x, bench/results/speed/population_batch_full_cpu.json) in P times the memory."""
    free_bytes = free_device_bytes(next(model.parameters()).device)
    if free_bytes is None:
        return 1
    return candidates_per_generate(free_bytes, candidate_bytes(model, parameters, rows, PROMPT_TOKENS + max_new_tokens),
                                   population)

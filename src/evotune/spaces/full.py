"""Full-parameter space for ES at Scale (Qiu et al. 2025, arXiv 2509.24372).

Candidates are (seed, signed scale) pairs; the perturbation of every selected tensor is
regenerated from the seed, one tensor at a time, and written in place, so the extra
memory is one tensor's noise, never a second model on the device.

Exactness: adding then subtracting noise in bf16/fp16 drifts. The mean lives in an fp32
master copy (beside the weights on a GPU when it fits, else on the host: `master_device`, see
master_device_for); apply() writes cast(master + scale * noise) and restore() writes
cast(master), so after any number of cycles the live weights are bit-identical. Updates
accumulate in fp32 into the master and are written to the live weights once.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import ConfigError
from ..optimizers import Optimizer
from ..types import Candidate, Member
from .base import FactoredSpace
from .drift import snapshot, weight_drift, weight_sums
from .noise import CHUNK_SIZE, fill_noise_chunk
from .prefetch import MEAN, WeightPrefetcher
from .shards import Shard


def select_parameters(model: torch.nn.Module | None, include: list[str] | None, exclude: list[str] | None,
                      named_tensors: list[tuple[str, torch.Tensor]] | None = None) -> list[tuple[str, torch.Tensor]]:
    """Parameters whose name matches any `include` regex (all if None) and no `exclude` regex.

    named_parameters() already drops tied duplicates (e.g. a tied lm_head), so a shared
    tensor is perturbed once, under its first name. `named_tensors` replaces the model's
    parameters with given (name, tensor) pairs, e.g. HF-named views into an engine's fused weights.
    """
    selected = []
    for name, param in (named_tensors if named_tensors is not None else model.named_parameters()):
        if include and not any(re.search(pattern, name) for pattern in include):
            continue
        if exclude and any(re.search(pattern, name) for pattern in exclude):
            continue
        selected.append((name, param))
    if not selected:
        raise ConfigError(
            f"`parameters`={include!r} with `exclude_parameters`={exclude!r} selects no parameter of the "
            f"model. Names look like {(named_tensors or list(model.named_parameters()) or [('?',)])[0][0]!r}; "
            "set `parameters` to regexes that match some of them (or leave it empty for all).")
    return selected


@dataclass(frozen=True)
class StackedWeight:
    """One perturbed parameter of `space: full` as a batched forward sees it: a member's copy of the parameter is
    a whole tensor of `shape` (backends/stacked_weights.py)."""

    name: str  # parameter name, as model.named_parameters() gives it (a tied weight: its first name)
    shape: tuple[int, ...]


# `master_device: auto` keeps the fp32 master on the GPU only if this much stays free besides it.
MASTER_HEADROOM_BYTES = 2 * 2**30
MASTER_DEVICES = ("host", "device", "auto")


def master_device_for(setting: str, live: torch.device, num_parameters: int) -> torch.device:
    """Where the fp32 master of `num_parameters` weights living on `live` goes (`master_device`). On the host, every
    candidate written moves 8 bytes per weight to the GPU (4 of the master, and its noise); beside the weights, it
    takes 4 bytes of GPU memory per weight and moves nothing. auto: beside them when MASTER_HEADROOM_BYTES stay
    free. A CPU's weights are on the host either way."""
    if setting not in MASTER_DEVICES:
        raise ConfigError(f"`master_device` is {setting!r}; set it to one of {', '.join(MASTER_DEVICES)}.")
    if live.type != "cuda" or setting == "host":
        return torch.device("cpu")
    if setting == "device":
        return live
    free, _ = torch.cuda.mem_get_info(live)
    return live if free >= 4 * num_parameters + MASTER_HEADROOM_BYTES else torch.device("cpu")


class FullParameterSpace(FactoredSpace):
    """All (or a regex-selected subset of) a model's parameters, perturbed in place, or (candidate_factors) as
    one stacked copy per member for a population-batched forward."""
    population_batching = "requested"  # stacked full copies, on the hf backend (`population_batch_size`)

    @classmethod
    def from_config(cls, config: Any, backend: Any, optimizer: Optimizer) -> FullParameterSpace:
        """The run's space (registry entry `full` on the hf backend) over `backend.model`."""
        space = cls(backend.model, config.parameters or None, config.exclude_parameters or None,
                    noise_kind=config.noise, optimizer=optimizer, keep_base=config.log_drift,
                    prefetch=config.prefetch_candidates)
        space.place_master_for(config.master_device)
        return space

    def __init__(self, model: torch.nn.Module | None, include: list[str] | None = None,
                 exclude: list[str] | None = None, noise_kind: str = "gaussian",
                 num_threads: int | None = None, named_tensors: list[tuple[str, torch.Tensor]] | None = None,
                 optimizer: Optimizer | None = None, shards: dict[str, Shard] | None = None,
                 keep_base: bool = False, prefetch: bool = False):
        """shards: for tensors that are one tensor-parallel rank's slice of a larger tensor, where the slice
        sits (spaces/shards.py): they get exactly their part of the whole tensor's noise.
        keep_base: keep the starting weights for drift_metrics() (also kept when the optimizer anchors).
        prefetch: write the next member's weights into a second copy of the weights on a worker thread while
        the current one generates (spaces/prefetch.py); model parameters only (no named_tensors, no shards)."""
        self.model = model
        self.shards = dict(shards or {})
        self.noise_kind = noise_kind
        self.optimizer = optimizer
        self.parameters = select_parameters(model, include, exclude, named_tensors)
        # fp32 master copy, on the host until place_master() moves it: the exact mean (invariant: no drift).
        self.master_device = torch.device("cpu")
        self.master = {name: param.detach().to("cpu", torch.float32, copy=True) for name, param in self.parameters}
        # the starting weights in their own dtype (exact, spaces/drift.py), taken before any checkpoint's mean
        # is loaded: what anchored weight decay pulls toward and drift is measured from
        anchored = optimizer is not None and optimizer.anchor_fraction() > 0
        self.base = snapshot(self.parameters) if keep_base or anchored else None
        # Tensors are independent, so noise could be drawn in several threads; on CPU that
        # leaves extra OpenMP teams spinning and slowed the next generate() by ~45% (measured),
        # so one thread is the default and threads are opt-in (e.g. for GPU-resident weights).
        self.num_threads = num_threads or 1
        self._pool = ThreadPoolExecutor(self.num_threads) if self.num_threads > 1 else None
        self._scratch = threading.local()  # per thread: reusable fp32 buffers, as large as the largest tensor
        if prefetch and (named_tensors is not None or self.shards):
            raise ConfigError("`prefetch_candidates` swaps whole parameter tensors, so it needs a model's own "
                              "parameters (backend: hf), not an engine's views or shards; set it to false here.")
        self._prefetcher = WeightPrefetcher(self.parameters, self._write) if prefetch else None
        self.factors: Sequence = [StackedWeight(name, tuple(param.shape)) for name, param in self.parameters]

    @property
    def num_parameters(self) -> int:
        return sum(tensor.numel() for tensor in self.master.values())

    def _buffer(self, slot: str, size: int, device: torch.device) -> torch.Tensor:
        """A (size,) fp32 view into a per-thread buffer of CHUNK_SIZE, reused for every chunk."""
        buffer = getattr(self._scratch, slot, None)
        if buffer is None or buffer.device != device:
            buffer = torch.empty(CHUNK_SIZE, dtype=torch.float32, device=device)
            setattr(self._scratch, slot, buffer)
        return buffer[:size]

    def _chunks(self, name: str, param: torch.nn.Parameter):
        """(noise chunk, live slice, master slice) over the flattened tensor, CHUNK_SIZE at a time.

        The chunk is an int, or for a shard (chunk index, global start, local start, local end): the
        slices are then the shard's elements whose values come from that chunk of the whole tensor's noise.
        """
        live, master = param.data.view(-1), self.master[name].view(-1)
        shard = self.shards.get(name)
        if shard is None:
            for chunk, start in enumerate(range(0, live.numel(), CHUNK_SIZE)):
                yield chunk, live[start:start + CHUNK_SIZE], master[start:start + CHUNK_SIZE]
            return
        for piece in shard.pieces(tuple(param.shape), CHUNK_SIZE):
            _, _, low, high = piece
            yield piece, live[low:high], master[low:high]

    def _noise(self, seed: int, name: str, chunk: int | tuple[int, int, int, int], live: torch.Tensor,
               scale: float = 1.0) -> torch.Tensor:
        """(chunk,) fp32: scale * this chunk's noise, in a reused buffer."""
        out = self._buffer("noise", live.numel(), live.device)
        if isinstance(chunk, int):
            return fill_noise_chunk(out, seed, name, chunk, self.noise_kind, scale)
        index, first, low, high = chunk  # a shard's piece: draw the whole chunk, keep this rank's elements
        shard = self.shards[name]
        size = min(CHUNK_SIZE, math.prod(shard.global_shape) - first)
        whole = fill_noise_chunk(self._buffer("whole", size, live.device), seed, name, index, self.noise_kind, scale)
        return shard.gather(whole, first, low, high, tuple(self.master[name].shape), out)

    def _for_each(self, work: Callable[[str, torch.nn.Parameter], None]) -> None:
        def run(item: tuple[str, torch.nn.Parameter]) -> None:
            with torch.no_grad():  # grad mode is per thread: pool threads need their own
                work(*item)

        if self._pool is None:
            for item in self.parameters:
                run(item)
        else:  # list() re-raises the first exception of any tensor's work
            list(self._pool.map(run, self.parameters))

    def _write(self, target: Candidate | str, name: str, tensor: torch.Tensor) -> None:
        """Write `target`'s values of parameter `name` into `tensor` (the parameter, or a prefetcher's spare
        tensor of its shape and dtype): mean + the candidate's perturbation, or the mean for MEAN."""
        if isinstance(target, str):  # MEAN
            tensor.copy_(self.master[name])
            return
        for chunk, live, master in self._chunks(name, tensor):
            perturbation = self._noise(target.seed, name, chunk, live, target.scale)  # (chunk,) fp32
            # mean + scale * eps in fp32, rounded once into the live dtype as it is written: one pass over
            # the chunk (the same bits as adding in place, then copying)
            torch.add(perturbation, master.to(live.device), out=live)

    def apply(self, candidate: Candidate) -> None:
        if self._prefetcher is not None and self._prefetcher.take(candidate):
            return  # its weights were written while the previous member generated
        self._for_each(lambda name, param: self._write(candidate, name, param))

    def candidate_factors(self, candidates: Sequence[Member]) -> list[torch.Tensor]:
        """Per parameter (self.factors order), every candidate's weights stacked, (P, *shape) in the live dtype and
        device: the same bits apply(candidates[c]) writes, without touching the live weights."""
        if self.shards:
            raise ConfigError("population-batched full-rank candidates need whole tensors, not tensor-parallel "
                              "shards; leave `population_batch_size` unset.")
        if not all(isinstance(candidate, Candidate) for candidate in candidates):
            raise ConfigError("`space: full` takes seed candidates (`strategy: openes`), not vectors.")
        stacked = []
        for name, param in self.parameters:
            copies = torch.empty((len(candidates), *param.shape), dtype=param.dtype, device=param.device)
            with torch.no_grad():
                for index, candidate in enumerate(candidates):
                    self._write(candidate, name, copies[index])
            stacked.append(copies)
        return stacked

    def restore(self) -> None:
        if self._prefetcher is not None and self._prefetcher.take(MEAN):
            return
        self._for_each(lambda name, param: self._write(MEAN, name, param))

    def prefetch(self, member: Candidate | None) -> None:
        """Start writing what the next apply(member) (None: restore()) will write, when built with prefetch."""
        if self._prefetcher is not None:
            self._prefetcher.start(MEAN if member is None else member)

    def _base_chunk(self, name: str, chunk: int | tuple[int, int, int, int], master: torch.Tensor) -> torch.Tensor:
        """(chunk,) fp32 in a reused buffer: the base's values of the elements `master` (a _chunks slice) holds."""
        start = chunk * CHUNK_SIZE if isinstance(chunk, int) else chunk[2]  # a shard's piece: its local start
        base = self.base[name].view(-1)[start:start + master.numel()]
        return self._buffer("base", master.numel(), master.device).copy_(base)

    def checked_anchor_fraction(self, optimizer: Optimizer) -> float:
        """The optimizer's anchored-weight-decay fraction, checked against the base this space kept."""
        fraction = optimizer.anchor_fraction()
        if fraction and self.base is None:
            raise ConfigError(f"{type(self).__name__} was built without its base weights, so anchor_decay has "
                              "nothing to pull toward; build it with the anchoring optimizer (or keep_base=True).")
        return fraction

    def step(self, seeds: list[int], coefficients: list[float]) -> None:
        optimizer = self.require_optimizer()
        if self._prefetcher is not None:
            self._prefetcher.settle()  # the mean is about to move: a prefetched member would be stale
        optimizer.begin_step()
        fraction = self.checked_anchor_fraction(optimizer)

        def step(name: str, param: torch.nn.Parameter) -> None:
            for chunk, live, master in self._chunks(name, param):
                gradient = self._buffer("gradient", live.numel(), live.device).zero_()  # fp32 accumulator
                for seed, coefficient in zip(seeds, coefficients):
                    if coefficient != 0.0:
                        gradient.add_(self._noise(seed, name, chunk, live), alpha=float(coefficient))
                index = chunk if isinstance(chunk, int) else chunk[0]
                key = name if index == 0 else f"{name}#{index}"  # optimizer state is per chunk
                master.add_(optimizer.step(key, gradient, master.to(live.device)).to(master.device))
                if fraction:  # anchored weight decay: mean <- mean + fraction * (base - mean), in fp32
                    master.lerp_(self._base_chunk(name, chunk, master), fraction)
                live.copy_(master)
        self._for_each(step)

    def drift_metrics(self) -> dict[str, float]:
        """drift/ metrics of the mean against the base (spaces/drift.py); {} when no base is kept."""
        return weight_drift(weight_sums(self.master, self.base)) if self.base is not None else {}

    def noise_fingerprint(self) -> str:
        from .noise import noise_fingerprint

        return noise_fingerprint(self.noise_kind, self.parameters[0][1].device)

    def place_master_for(self, setting: str) -> None:
        """Place the master where `master_device` SETTING puts it for these weights (master_device_for)."""
        self.place_master(master_device_for(setting, self.parameters[0][1].device, self.num_parameters))

    def place_master(self, device: torch.device | str) -> None:
        """Keep the fp32 master on `device` (master_device_for chooses); the same values, so the same run."""
        if self._prefetcher is not None:
            self._prefetcher.settle()
        self.master_device = torch.device(device)
        for name in self.master:
            self.master[name] = self.master[name].to(self.master_device)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The fp32 mean on the host (the master itself when it lives there; a copy from a GPU)."""
        return {name: tensor.cpu() for name, tensor in self.master.items()}

    def mean_tensors(self) -> Iterable[torch.Tensor]:
        """The master where it lives (no copy of a GPU master to the host)."""
        return self.master.values()

    @torch.no_grad()
    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        missing = set(self.master) - set(tensors)
        if missing:
            raise ConfigError(f"checkpoint lacks {len(missing)} parameters of the model (e.g. {sorted(missing)[0]!r}): "
                              "it was written for another model or `parameters` selection; resume with the same "
                              "config.")
        if self._prefetcher is not None:
            self._prefetcher.settle()
        for name in self.master:
            self.master[name] = tensors[name].to(self.master_device, torch.float32, copy=True)
        self.restore()

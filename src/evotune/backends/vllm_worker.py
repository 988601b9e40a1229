"""The engine side of `backend: vllm`: evotune's worker extension, mixed into every vLLM worker (one per
tensor-parallel rank) and driven by collective_rpc from EngineSpace (vllm_spaces.py).

Only vLLM imports this module, when it resolves `worker_extension_cls` in the worker's process, before
the model loads; importing it installs the CPU dispatch that keeps the engine's weights writable
(vllm_cpu.keep_engine_weights), whatever the user's script imported first. That is why the class
lives here and not in vllm.py, which a user's script (re-imported by a spawned engine process) imports.
"""

from __future__ import annotations

import atexit
import gc
import multiprocessing
from typing import Any

from ..errors import ConfigError
from ..optimizers import Chain
from ..spaces import FullParameterSpace
from ..types import Candidate
from .vllm_cpu import keep_engine_weights

# The names multiprocessing gives the processes vLLM starts for an engine: its engine core, and a worker per rank.
VLLM_ENGINE_PROCESSES = ("EngineCore", "VllmWorker")


def is_vllm_engine_process(name: str, has_parent: bool) -> bool:
    """True in a process vLLM started for an engine; False in the user's own (an in-process engine, a Ray actor)."""
    return has_parent and name.startswith(VLLM_ENGINE_PROCESSES)


def freeze_heap_at_exit() -> bool:
    """In a process vLLM started for an engine: freeze the heap when the process exits (True), else nothing.

    vLLM freezes the heap once its engine has started and unfreezes it at shutdown, so that an in-process
    engine's memory can be freed. Its own engine processes then exit with every object of torch and vLLM back
    under the collector, and the interpreter's last collections walk them all: ~1.5 s of CPU per process (an
    engine's close on 2 CPU cores, one worker: 5.0 s -> 3.5 s, bench/engine_close.py). Frozen at exit, the
    process ends at once and the OS takes its memory back. The user's own process is never touched."""
    process = multiprocessing.current_process()
    if not is_vllm_engine_process(process.name, multiprocessing.parent_process() is not None):
        return False
    atexit.unregister(gc.freeze)  # once, however often this runs
    atexit.register(gc.freeze)  # atexit runs before the interpreter's last collections
    return True


keep_engine_weights()  # before this process's engine loads its model
freeze_heap_at_exit()


class EngineWeightsExtension:
    """Mixed into vLLM's worker (worker_extension_cls); methods are called with collective_rpc, on every
    tensor-parallel rank.

    The RPC names and arguments are a stable interface: evotune_init, evotune_apply, evotune_restore,
    evotune_update(seeds, coefficients), evotune_save_state(directory), evotune_load_state(path),
    evotune_drift_sums, evotune_is_finite, evotune_checksum, evotune_noise_fingerprint, evotune_transfer_bytes.
    Arguments and results are plain numbers,
    strings, lists and dicts only: on CUDA (and with `engine_core: separate_process`) the engine core is
    another process and vLLM carries both through msgpack with no type information, so a tensor would
    arrive as nested lists. State moves as safetensors files; checks are computed here and return numbers.
    """

    def evotune_init(self, hf_shapes: dict[str, list[int]], include: list[str] | None, exclude: list[str] | None,
                     noise_kind: str, optimizer: dict[str, Any], master_device: str = "auto",
                     perturbation_rank: int | None = None, linear_names: list[str] | None = None,
                     keep_base: bool = False) -> int:
        """A FullParameterSpace over this rank's part of the engine's weights; with perturbation_rank, a
        LowRankSpace (space: lowrank) over the Linear weights named in `linear_names` (its members come as
        LoRA requests). optimizer: the driver's chain as `Chain.describe()` gives it. Anchored decay or
        keep_base: the space snapshots this rank's base weights on the host, in this process, now (before any
        checkpoint's mean is loaded). Returns the number of weights the space moves, summed over all ranks'
        shards."""
        import math

        from .vllm_cpu import packed_weight_layers
        from .vllm_weights import engine_pieces

        model = self.model_runner.model
        packed = packed_weight_layers(model)
        if packed:
            raise ConfigError(
                f"the engine dropped the plain weights of {len(packed)} layers (e.g. {packed[0]}) after packing them "
                "for its CPU kernels, so ES cannot write them. Create the engine through "
                "evotune.backends.vllm.VLLMBackend, or call evotune.backends.vllm_cpu.keep_engine_weights() before "
                "vllm.LLM(...) in the process that loads the model.")
        shapes = {name: tuple(shape) for name, shape in hf_shapes.items()}
        pieces = engine_pieces(model.named_parameters(), shapes, model)
        views = [(name, view) for name, view, _ in pieces]
        shards = {name: shard for name, _, shard in pieces if shard is not None}
        if perturbation_rank is not None:
            from ..spaces.lowrank import LowRankSpace

            linear = set(linear_names or ())
            # with tensor parallelism each rank moves its slice of every weight by its slice of the whole
            # weights' factors (spaces/lowrank.py), so TP=2 ends on the weights TP=1 does
            self.evotune_space = LowRankSpace(None, perturbation_rank, include, exclude, noise_kind,
                                              Chain.from_description(optimizer),
                                              named_tensors=[(name, view) for name, view in views if name in linear],
                                              keep_base=keep_base, shards=shards)
        else:
            optimizer_object = Chain.from_description(optimizer)
            self.evotune_space = FullParameterSpace(None, include, exclude, noise_kind=noise_kind,
                                                    named_tensors=views, shards=shards, optimizer=optimizer_object,
                                                    keep_base=keep_base)
        self.evotune_shards = shards
        self.evotune_space.place_master_for(master_device)
        return sum(math.prod(shapes[name]) for name in self.evotune_space.master)

    def _evotune_rank(self) -> int:
        return int(getattr(self, "rank", 0))

    def evotune_apply(self, seed: int, scale: float) -> None:
        self.evotune_space.apply(Candidate(seed, scale))

    def evotune_restore(self) -> None:
        self.evotune_space.restore()

    def evotune_update(self, seeds: list[int], coefficients: list[float]) -> None:
        self.evotune_space.step(seeds, coefficients)

    def evotune_save_state(self, directory: str) -> str:
        """Write this rank's part of the fp32 mean to DIRECTORY/rank-R.safetensors (with where each tensor
        sits in the HF tensor); returns the file's path. EngineSpace.state_tensors assembles the ranks'."""
        from .engine_state import save_rank_state

        return save_rank_state(directory, self._evotune_rank(), self.evotune_space.state_tensors(),
                               self.evotune_shards)

    def evotune_load_state(self, path: str) -> None:
        """Load the mean from a safetensors file of whole HF tensors, reading only this rank's slices."""
        from .engine_state import read_rank_slices

        self.evotune_space.load_state_tensors(read_rank_slices(path, self.evotune_space.master, self.evotune_shards))

    def evotune_drift_sums(self) -> dict[str, list[float]]:
        """Per parameter group, this rank's drift sums (spaces/drift.py, weight_sums): plain numbers. A tensor
        that every rank holds whole (not sharded) is counted on rank 0 only. {} when no base is kept."""
        from ..spaces.drift import weight_sums

        space = self.evotune_space
        if space.base is None:
            return {}
        names = [name for name in space.master if self._evotune_rank() == 0 or name in self.evotune_shards]
        return weight_sums(space.master, space.base, names)

    def evotune_is_finite(self) -> bool:
        return self.evotune_space.mean_is_finite()

    def evotune_checksum(self) -> str:
        """A hash of this rank's exact mean (EngineSpace.checksum combines the ranks')."""
        return self.evotune_space.checksum()

    def evotune_noise_fingerprint(self) -> str:
        """Which noise this rank draws (spaces/noise.py, noise_fingerprint): its device's generator."""
        return self.evotune_space.noise_fingerprint()

    def evotune_transfer_bytes(self) -> dict[str, Any]:
        """Host<->device bytes per apply, restore and update, from where the master and the weights live.

        apply() writes cast(master + scale * noise): the master is read on the weights' device, so a host
        master crosses once (4 bytes per weight); restore() copies the master into the weights (4 bytes
        per weight); an update reads the master there and writes it back (8), then the weights (4).
        """
        crossings = sum(4 * master.numel() for (name, live), master in
                        zip(self.evotune_space.parameters, self.evotune_space.master.values())
                        if master.device != live.device)
        return {"master_device": str(self.evotune_space.master_device), "apply": crossings, "restore": crossings,
                "update": 3 * crossings, "per_candidate": 2 * crossings,
                "master_bytes": 4 * self.evotune_space.num_parameters}

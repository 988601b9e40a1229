"""How long a vLLM engine in its own processes takes to close, with and without evotune's worker extension.

vLLM unfreezes its engine processes' heap at shutdown, so each exits with every object of torch and vLLM back under
the garbage collector, and the interpreter's last collections walk them all. evotune's worker extension, imported
in each of vLLM's worker processes, freezes the heap when that process exits (vllm_worker.freeze_heap_at_exit).
Side by side in one run, alternating: the same engine (the engine core in its own process, as on CUDA; on a CPU,
vLLM adds a worker process) with `worker_extension_cls` unset (vLLM alone) and set to evotune's.

    python -m bench.speed.engine_close --repeats 3      # -> bench/results/speed/engine_close.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.common import study_results


def start_and_close(model: str, extension: str | None) -> tuple[float, float]:
    """(seconds to start, seconds to close) of one engine."""
    import torch
    from vllm import LLM

    from evotune.backends.vllm_cpu import cpu_engine_options, engine_environment

    on_cpu = not torch.cuda.is_available()
    # the engine options VLLMBackend gives an engine in its own process
    options = cpu_engine_options(None, in_process=False) if on_cpu else {"gpu_memory_utilization": 0.3}
    started = time.perf_counter()
    with engine_environment(in_process=False, on_cpu=on_cpu):
        llm = LLM(model=model, dtype="float32", worker_extension_cls=extension or "", **options)
    ready = time.perf_counter()
    llm.llm_engine.engine_core.shutdown()
    return ready - started, time.perf_counter() - ready


def main() -> None:
    from evotune.backends.vllm_cpu import EXTENSION
    from evotune.doctor import save_tiny_model

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=str(study_results("speed") / "engine_close.json"))
    args = parser.parse_args()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    model = save_tiny_model(str(Path(tempfile.mkdtemp(prefix="evotune-close-")) / "model"))
    arms = {"vllm alone": None, "evotune worker extension": EXTENSION}
    runs: dict[str, list[tuple[float, float]]] = {arm: [] for arm in arms}
    for _ in range(args.repeats):  # alternating, so a slower stretch of the machine hits both arms
        for arm, extension in arms.items():
            runs[arm].append(start_and_close(model, extension))
    result = {"command": "python -m bench.speed.engine_close " + " ".join(sys.argv[1:]),
              "engine": "vLLM on the doctor's tiny Llama, engine core in its own process (separate_process)",
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
              "python": platform.python_version(), "repeats": args.repeats}
    for arm, values in runs.items():
        result[arm] = {"start_s_median": round(statistics.median(start for start, _ in values), 2),
                       "close_s_median": round(statistics.median(close for _, close in values), 2),
                       "close_s": [round(close, 2) for _, close in values]}
    result["close_ratio"] = round(result["evotune worker extension"]["close_s_median"]
                                  / result["vllm alone"]["close_s_median"], 3)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":  # vLLM starts its engine processes with spawn, which imports this module again
    main()

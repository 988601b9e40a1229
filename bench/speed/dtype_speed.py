"""float32 vs bfloat16 on the machine this runs on, side by side in one process: what `dtype: auto` should pick.

Three workloads with the built-in model, each timed in both dtypes, interleaved (a warm-up, then
`--repeats` rounds of float32 and bfloat16 in turn, so a neighbour's load hits both arms alike):

- generation: greedy decoding of 32 arithmetic prompts x 10 new tokens (one ES candidate's work;
  EOS is suppressed until the last token, so both dtypes generate the same number of tokens);
- forward: one forward pass over the same 32 prompts (scoring, KL);
- backward: forward + backward of 8 prompts through a fresh LoRA adapter on Q/K/V/O (one SFT or
  GRPO step's gradient; the adapter stays fp32, the base is in the dtype under test).

It reports the medians, the bfloat16/float32 time ratios (of the medians, the median of the
back-to-back pairs, and of CPU seconds, the steadier number on a shared machine, whose load average
it records too), the CPU model and its bf16-relevant flags, and what `dtype: auto` picks here, in
bench/results/speed/dtype_speed_<cpu tag>.json.

    python -m bench.speed.dtype_speed
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from bench.common import write_result

DTYPES = ("float32", "bfloat16")
WORKLOADS = ("generation", "forward", "backward")
# Flags that decide bf16 speed on x86 (avx512_bf16 / amx_bf16: native bf16 dot products) and context.
RELEVANT_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16", "bf16")


def cpu_tag(model_name: str, flags: frozenset[str]) -> str:
    """A short file-name tag, e.g. intel_xeon_avx512bf16 or amd_epyc_avx2: the CPU family and its best bf16 path."""
    words = [word.lower() for word in model_name.replace("(R)", " ").replace("(TM)", " ").split()]
    family = "_".join(word for word in words if word in ("intel", "amd", "xeon", "epyc", "core", "ryzen",
                                                         "neoverse", "graviton")) or "cpu"
    for flag, tag in (("amx_bf16", "amx"), ("avx512_bf16", "avx512bf16"), ("avx512f", "avx512"), ("avx2", "avx2")):
        if flag in flags:
            return f"{family}_{tag}"
    return family


def encode(tokenizer, texts: list[str]) -> dict:
    return tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)


def timed(function) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process): on a shared machine the CPU time is the steadier one."""
    started, cpu_started = time.perf_counter(), time.process_time()
    function()
    return time.perf_counter() - started, time.process_time() - cpu_started


def workloads(dtype: str, args: argparse.Namespace, prompts: list) -> dict:
    """name -> a function running that workload once in `dtype`.

    Generation and forward run on the plain model as ES loads it; backward on a second copy wrapped in
    a LoRA adapter, since PEFT freezes the base weights and frozen weights take other CPU kernels.
    """
    import torch

    from evotune.backends import HFBackend
    from evotune.backends.hf import render_prompt
    from evotune.spaces.lora import init_lora_adapter

    backend = HFBackend.load(args.model, dtype, "cpu")
    backend.model.generation_config.min_new_tokens = args.max_new_tokens  # the same tokens in both dtypes
    texts = [render_prompt(backend.tokenizer, prompt) for prompt in prompts]
    batch = encode(backend.tokenizer, texts)
    adapted = init_lora_adapter(HFBackend.load(args.model, dtype, "cpu").model, rank=8, seed=0)  # B = 0: a no-op
    training = encode(backend.tokenizer, texts[:args.backward_examples])
    labels = training["input_ids"].masked_fill(training["attention_mask"] == 0, -100)

    def generation() -> None:
        assert len(backend.generate(prompts, args.max_new_tokens)) == len(prompts)

    def forward() -> None:
        with torch.inference_mode():
            backend.model(**batch)

    def backward() -> None:
        adapted(**training, labels=labels).loss.backward()
        adapted.zero_grad(set_to_none=True)

    return {"generation": generation, "forward": forward, "backward": backward}


def summary(wall: dict, cpu: dict, name: str) -> dict:
    """Per-dtype times, their medians, and bfloat16 / float32 ratios (> 1: bfloat16 is slower)."""
    median = {dtype: statistics.median(wall[(name, dtype)]) for dtype in DTYPES}
    cpu_median = {dtype: statistics.median(cpu[(name, dtype)]) for dtype in DTYPES}
    pairs = [b / f for f, b in zip(wall[(name, "float32")], wall[(name, "bfloat16")])]
    return {**{f"{dtype}_s": wall[(name, dtype)] for dtype in DTYPES},
            **{f"{dtype}_median_s": round(median[dtype], 3) for dtype in DTYPES},
            **{f"{dtype}_cpu_s": cpu[(name, dtype)] for dtype in DTYPES},
            "bfloat16_over_float32": round(median["bfloat16"] / median["float32"], 3),
            "bfloat16_over_float32_paired": round(statistics.median(pairs), 3),  # median of back-to-back ratios
            "bfloat16_over_float32_cpu": round(cpu_median["bfloat16"] / cpu_median["float32"], 3),
            "faster": min(DTYPES, key=median.get)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=10)
    parser.add_argument("--backward-examples", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch

    from evotune.backends.models import BF16_CPU_FLAGS, auto_dtype, cpu_flags
    from evotune.tasks import get_task

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]  # other processes on the machine slow both arms; say how busy it was
    prompts = [row["prompt"] for row in get_task("arithmetic", seed=0).train_rows[:args.prompts]]
    runs = {dtype: workloads(dtype, args, prompts) for dtype in DTYPES}
    for dtype in DTYPES:
        for function in runs[dtype].values():
            function()  # warm-up: allocator, oneDNN kernels for this dtype
    wall = {(name, dtype): [] for name in WORKLOADS for dtype in DTYPES}
    cpu = {(name, dtype): [] for name in WORKLOADS for dtype in DTYPES}
    for _ in range(args.repeats):  # float32 and bfloat16 back to back, so a neighbour's load hits both
        for name in WORKLOADS:
            for dtype in DTYPES:
                seconds, cpu_seconds = timed(runs[dtype][name])
                wall[(name, dtype)].append(round(seconds, 3))
                cpu[(name, dtype)].append(round(cpu_seconds, 3))
    flags = cpu_flags()
    model_name = _cpu_model_name()
    auto, why = auto_dtype("cpu", flags)
    results = {name: summary(wall, cpu, name) for name in WORKLOADS}
    payload = {
        "command": "python -m bench.speed.dtype_speed " + " ".join(sys.argv[1:]),
        "model": args.model, "prompts": args.prompts, "max_new_tokens": args.max_new_tokens,
        "backward_examples": args.backward_examples, "repeats": args.repeats, "torch_threads": args.threads,
        "cpu_model": model_name,
        "cpu_flags": {flag: flag in flags for flag in RELEVANT_FLAGS},
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "auto_picks": auto, "auto_reason": why, "auto_flags": list(BF16_CPU_FLAGS),
        "auto_picks_the_faster_generation": auto == results["generation"]["faster"],
        "load_average_1min": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        **results,
    }
    write_result(f"dtype_speed_{cpu_tag(model_name, flags)}", payload, study="speed")


def _cpu_model_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()

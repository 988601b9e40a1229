"""float32 vs INT8 vs INT4 base under the same LoRA adapter on this CPU: generation time, memory, and where the
time goes (bitsandbytes 0.50's CPU paths), for ESSA's quantized runs (`quantization: int8 | int4`).

One worker process per precision, each with one thread, holding SmolLM2-135M-Instruct (an HF directory, exported
from the built-in GGUF once) with its base in float32, INT8 (LLM.int8) or INT4 (nf4, compute float32) and the same
rank-8 LoRA adapter on Q/K/V/O. The parent interleaves the timed repeats (round r runs every precision once, in a
rotated order, so a neighbour's load hits all arms alike): greedy generation of 16 arithmetic prompts x 16 new tokens
(EOS suppressed until then, so every arm generates the same number of tokens). Per precision: median wall and CPU
seconds and their ratios to float32 (median of the per-round ratios), the base's get_memory_footprint(), the
process's RSS (after loading and a warm-up generate; after handing freed memory back with malloc_trim) and its peak
RSS (loading included; then the timed generations alone), the top operators of one
profiled generate (torch.profiler, self CPU time), and how many completions equal float32's.

    python -m bench.essa_quantization.quantization_speed                 #
    bench/results/essa_quantization/quantization_speed.json
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import peak_rss_bytes, reset_peak_rss, rss_bytes, write_result

PRECISIONS = ("float32", "int8", "int4")
MIB = 1024 * 1024


def export_base(model_dir: Path) -> None:
    """The built-in GGUF as a float32 save_pretrained directory (bitsandbytes quantizes directories, not GGUF)."""
    if not (model_dir / "config.json").exists():
        from evotune.runs.export import export_model

        export_model("smollm2-135m-instruct", str(model_dir), dtype="float32")


def make_adapter(model_dir: Path, adapter_dir: Path, rank: int) -> None:
    """A rank-`rank` LoRA on Q/K/V/O with A gaussian (PEFT) and B small and random (seeded), so it changes the
    outputs as a trained adapter does; written once and loaded by every worker."""
    if (adapter_dir / "adapter_config.json").exists():
        return
    import torch

    from evotune.backends.models import load_model
    from evotune.spaces.lora import init_lora_adapter, lora_factors

    model, _ = load_model(str(model_dir), "float32", "cpu")
    model = init_lora_adapter(model, rank=rank, init="gaussian", seed=0)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for factor in lora_factors(model):
            if factor.factor == "B":  # (out, r)
                factor.weight.copy_(torch.randn(factor.weight.shape, generator=generator) * 0.02)
    model.save_pretrained(str(adapter_dir))


# --- the worker: one precision, one thread, commands on stdin, one JSON line per answer --------------------------


def load_worker(args: argparse.Namespace) -> tuple:
    import torch
    from peft import PeftModel

    from evotune.backends.hf import render_prompt
    from evotune.backends.models import load_model
    from evotune.tasks import get_task

    torch.set_num_threads(1)
    base, tokenizer = load_model(args.model_dir, "float32", "cpu", "none" if args.worker == "float32" else args.worker)
    footprint = base.get_memory_footprint()
    model = PeftModel.from_pretrained(base, args.adapter).eval()
    rows = get_task("arithmetic", seed=0).eval_rows[:args.prompts]
    texts = [render_prompt(tokenizer, row["prompt"]) for row in rows]
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    return model, tokenizer, batch, footprint


def generate(model, tokenizer, batch, new_tokens: int) -> list[str]:
    import torch

    with torch.inference_mode():
        output = model.generate(**batch, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                                pad_token_id=tokenizer.pad_token_id)  # (prompts, prompt length + new_tokens)
    return tokenizer.batch_decode(output[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)


def profile(model, tokenizer, batch, new_tokens: int, top: int = 10) -> list[dict]:
    """The operators with the most self CPU time in one generate (aten ops and bitsandbytes' custom ops)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as profiler:
        generate(model, tokenizer, batch, new_tokens)
    events = sorted(profiler.key_averages(), key=lambda event: event.self_cpu_time_total, reverse=True)
    total = sum(event.self_cpu_time_total for event in events)
    return [{"op": event.key, "self_cpu_s": round(event.self_cpu_time_total / 1e6, 3),
             "share": round(event.self_cpu_time_total / total, 3), "calls": event.count} for event in events[:top]]


def worker(args: argparse.Namespace) -> None:
    started_rss = rss_bytes()
    model, tokenizer, batch, footprint = load_worker(args)
    completions = generate(model, tokenizer, batch, args.new_tokens)  # warm-up
    loaded = {"base_memory_footprint_mib": round(footprint / MIB, 1),
              "rss_before_load_mib": round(started_rss / MIB, 1),
              "rss_after_load_and_warm_up_mib": round(rss_bytes() / MIB, 1),
              "peak_rss_load_and_warm_up_mib": round(peak_rss_bytes() / MIB, 1)}
    # Loading a quantized base reads float32 weights and quantizes them; glibc keeps much of what was freed.
    # malloc_trim hands it back: the RSS after it is what the model and runtime need (not done by evotune).
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    loaded["rss_after_malloc_trim_mib"] = round(rss_bytes() / MIB, 1)
    reset_peak_rss()
    print(json.dumps(loaded), flush=True)
    for command in sys.stdin:
        command = command.strip()
        if command == "run":
            wall, cpu = time.perf_counter(), time.process_time()
            generate(model, tokenizer, batch, args.new_tokens)
            answer = {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}
        elif command == "peak":  # read before profiling: the profiler's own records take memory
            answer = {"peak_rss_generating_mib": round(peak_rss_bytes() / MIB, 1)}
        elif command == "profile":
            answer = {"profile": profile(model, tokenizer, batch, args.new_tokens)}
        else:  # done
            answer = {"completions": completions}
        print(json.dumps(answer), flush=True)
        if command == "done":
            return


# --- the parent: start the workers, interleave, report ----------------------------------------------------------


class Worker:
    def __init__(self, precision: str, args: argparse.Namespace):
        command = [sys.executable, "-m", "bench.essa_quantization.quantization_speed", "--worker", precision,
                   "--model-dir", str(args.model_dir), "--adapter", str(args.adapter), "--prompts", str(args.prompts),
                   "--new-tokens", str(args.new_tokens)]
        environment = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        root = Path(__file__).resolve().parents[2]  # `python -m bench...` finds the bench package from there
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                        env=environment, cwd=root)
        self.loaded = self.read()

    def read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.process.args[3]} exited with {self.process.wait()}")
        return json.loads(line)

    def ask(self, command: str) -> dict:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.read()


def bitsandbytes_paths() -> dict:
    """Which CPU kernels bitsandbytes uses here (decided at import from the CPU's features)."""
    import bitsandbytes.backends.cpu.ops as ops
    import torch
    from bitsandbytes.functional import has_avx512bf16

    return {"bitsandbytes": __import__("bitsandbytes").__version__, "torch_cpu_capability":
            torch.backends.cpu.get_cpu_capability(), "avx512_bf16": bool(has_avx512bf16()),
            "int4_kernel": ("kernels-community gemm_4bit_forward" if getattr(ops, "gemm_4bit_forward_kernel", None)
                            else "libbitsandbytes_cpu gemv_4bit_inference_cpu_*_bf16 (fused, bfloat16)")
            if has_avx512bf16() else "dequantize to the compute dtype + torch matmul",
            "int8_matmul": "torch._int_mm" if torch.backends.cpu.get_cpu_capability() == "AVX512"
            else "dequantize + torch matmul"}


def summarize(times: dict[str, list[dict]]) -> dict:
    result = {}
    for precision, rounds in times.items():
        result[precision] = {key: round(statistics.median(r[key] for r in rounds), 3) for key in ("wall_s", "cpu_s")}
        for key in ("wall_s", "cpu_s"):
            ratios = [r[key] / f[key] for r, f in zip(rounds, times["float32"])]
            result[precision][f"{key}_ratio_to_float32"] = round(statistics.median(ratios), 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", choices=PRECISIONS, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", default="runs/smollm2-135m-instruct-hf",
                        help="SmolLM2 as an HF directory (exported from the built-in GGUF when missing)")
    parser.add_argument("--adapter", default="runs/quantization_speed_adapter", help="LoRA adapter (made if missing)")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--name", default="quantization_speed")
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    args.model_dir, args.adapter = Path(args.model_dir).resolve(), Path(args.adapter).resolve()
    export_base(args.model_dir)
    make_adapter(args.model_dir, args.adapter, rank=8)
    workers = {precision: Worker(precision, args) for precision in PRECISIONS}
    times: dict[str, list[dict]] = {precision: [] for precision in PRECISIONS}
    for round_index in range(args.repeats):
        order = PRECISIONS[round_index % 3:] + PRECISIONS[:round_index % 3]
        for precision in order:
            times[precision].append(workers[precision].ask("run"))
    peaks = {precision: workers[precision].ask("peak") for precision in PRECISIONS}
    profiles = {precision: workers[precision].ask("profile")["profile"] for precision in PRECISIONS}
    finals = {precision: workers[precision].ask("done") for precision in PRECISIONS}
    reference = finals["float32"]["completions"]
    write_result(args.name, {
        "command": "python -m bench.essa_quantization.quantization_speed " + " ".join(sys.argv[1:]),
        "model": "smollm2-135m-instruct (float32 HF export)", "adapter": "rank 8, q/k/v/o, the same file for all",
        "workload": f"greedy generate, {args.prompts} arithmetic prompts x {args.new_tokens} new tokens, 1 thread",
        "repeats": args.repeats, "paths": bitsandbytes_paths(),
        "time": summarize(times), "rounds": times,
        "memory": {precision: {**workers[precision].loaded, **peaks[precision]} for precision in PRECISIONS},
        "completions_equal_to_float32": {precision: sum(a == b for a, b in zip(finals[precision]["completions"],
                                                                              reference))
                                         for precision in PRECISIONS},
        "example_completions": {precision: finals[precision]["completions"][:3] for precision in PRECISIONS},
        "profile_top_ops": profiles,
        "load_average": os.getloadavg(),
    }, study="essa_quantization")


if __name__ == "__main__":
    main()

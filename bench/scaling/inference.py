"""The two arms a scaling cell runs without an evotune command, each in the cell's guarded process:

- `generate`: the pure-inference reference, the ES iteration's generates with no perturbation (MEMBERS generates of
  PROMPTS prompts x MAX_NEW_TOKENS tokens per iteration, evotune's hf backend);
- `peer`: the loop a user writes instead with torcheggroll 0.2.0 (its `prepare_population` / `apply_fitness_scores`
  API around transformers' `generate`): each member's weights loaded into the model, one greedy generate of the
  same prompts, the task's reward, then the update. Written from the package's README and docstrings.

    python -m bench.scaling.inference generate MODEL_DIR DTYPE OUTPUT.json [--members N]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from .arms import ITERATIONS, MAX_NEW_TOKENS, MEMBERS, PROMPTS


def prompts_and_task():
    from evotune.tasks import get_task

    task = get_task("arithmetic", seed=0)
    return task.train_rows[:PROMPTS], task


def generate(model_dir: str, dtype: str, members: int, iterations: int, device: str = "cpu") -> list[float]:
    """Seconds of each iteration of plain generation: `members` generates of the ES batch."""
    from evotune.backends import HFBackend

    backend = HFBackend.load(model_dir, dtype=dtype, device=device)
    rows, _ = prompts_and_task()
    seconds = []
    for _ in range(iterations):
        started = time.perf_counter()
        for _ in range(members):
            backend.generate([row["prompt"] for row in rows], MAX_NEW_TOKENS)
        synchronize(device)
        seconds.append(time.perf_counter() - started)
    return seconds


def synchronize(device: str) -> None:
    """Wait for the GPU's queued work, so that a timing ends when the work does."""
    if device != "cpu":
        import torch

        torch.cuda.synchronize()


def peer(model_dir: str, dtype: str, members: int, iterations: int, device: str = "cpu") -> list[float]:
    """Seconds of each iteration of torcheggroll's ES around transformers' generate (rank-1 noise, antithetic)."""
    import torch
    from torcheggroll import TorchEggrollES
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).to(device).eval()
    rows, task = prompts_and_task()
    texts = [tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
             if isinstance(row["prompt"], list) else row["prompt"] for row in rows]
    batch = tokenizer(texts, return_tensors="pt", padding=True).to(device)
    es = TorchEggrollES(model, pop_size=members, sigma=2e-3, lr=1.6e-2, rank=1, antithetic=True)
    seconds = []
    for _ in range(iterations):
        started = time.perf_counter()
        population = es.prepare_population()  # members x every parameter, materialized
        fitness = []
        for member in population:
            model.load_state_dict(member, strict=False)
            with torch.no_grad():
                output = model.generate(**batch, max_new_tokens=MAX_NEW_TOKENS, do_sample=False)
            completions = tokenizer.batch_decode(output[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
            fitness.append(float(task.rewards(rows, completions).mean()))
        es.apply_fitness_scores(torch.tensor(fitness, device=device))
        synchronize(device)
        seconds.append(time.perf_counter() - started)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("arm", choices=["generate", "peer"])
    parser.add_argument("model_dir")
    parser.add_argument("dtype")
    parser.add_argument("output", type=Path)
    parser.add_argument("--members", type=int, default=MEMBERS)
    parser.add_argument("--iterations", type=int, default=ITERATIONS)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    seconds = (generate if args.arm == "generate" else peer)(args.model_dir, args.dtype, args.members, args.iterations,
                                                            args.device)
    args.output.write_text(json.dumps({"seconds": [round(value, 3) for value in seconds]}))


if __name__ == "__main__":
    main()

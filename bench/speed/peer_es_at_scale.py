"""evotune's ES iteration side by side with the ES at Scale paper's loop, on one model and one set of prompts.

The peer is written from the paper's description (Qiu et al. 2025, "Evolution Strategies at Scale: LLM
Fine-Tuning Beyond Reinforcement Learning", arXiv 2509.24372, Algorithm 1 and its implementation notes),
not from its code:

    for each of N members: seed s_n
        perturb in place, tensor by tensor:  theta += sigma * eps(s_n, tensor)    (Gaussian, regenerated)
        one greedy generate over the batch, reward R_n
        restore in place by regenerating:     theta -= sigma * eps(s_n, tensor)
    z-score the rewards
    for each member, seed by seed, tensor by tensor:  theta += alpha / N * Z_n * eps(s_n, tensor)

Its noise is torch's generator seeded with the member's seed for each tensor (as the paper's
implementation seeds it), drawn in the weights' dtype; its batch is the plain left-padded generate().

evotune's arm: Trainer.step() with the same population size, sigma, learning rate, Gaussian noise, no
antithetic pairs, the same prompts (the arithmetic task's batch) and the same number of new tokens (EOS
suppressed until max_new_tokens in every arm, so every arm generates the same number of tokens). A third
arm is evotune with shared_prefix off, to show what the prefix pass contributes. Arms alternate within
each repeat (the order rotates), so load from other processes falls on all of them. Two models are
loaded (the peer's and evotune's), equal at the start.

    OMP_NUM_THREADS=1 python -m bench.speed.peer_es_at_scale --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

from bench.common import write_result
from evotune.backends import load_model, render_prompt  # noqa: E402
from evotune.config import TrainConfig  # noqa: E402
from evotune.tasks import get_task  # noqa: E402
from evotune.trainer import Trainer  # noqa: E402


class PaperLoop:
    """ES at Scale's iteration as the paper describes it: in-place perturbation and regenerate-and-subtract."""

    def __init__(self, model, tokenizer, task, population_size: int, sigma: float, learning_rate: float,
                 max_new_tokens: int, seed: int = 0):
        self.model, self.tokenizer, self.task = model, tokenizer, task
        self.population_size, self.sigma, self.learning_rate = population_size, sigma, learning_rate
        self.max_new_tokens = max_new_tokens
        self.rng = np.random.default_rng(seed)
        self.parameters = [param for _, param in model.named_parameters()]

    def _perturb(self, seed: int, scale: float) -> None:
        """theta += scale * eps(seed) for every tensor, the noise regenerated tensor by tensor."""
        for param in self.parameters:
            generator = torch.Generator(device=param.device).manual_seed(seed)
            noise = torch.randn(param.shape, generator=generator, dtype=param.dtype, device=param.device)
            param.data.add_(noise, alpha=scale)

    def _reward(self, rows: list[dict]) -> float:
        texts = [render_prompt(self.tokenizer, row["prompt"]) for row in rows]
        batch = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        output = self.model.generate(**batch, max_new_tokens=self.max_new_tokens, do_sample=False, temperature=None,
                                     top_p=None, top_k=None, pad_token_id=self.tokenizer.pad_token_id)
        completions = self.tokenizer.batch_decode(output[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
        return float(np.nanmean(self.task.rewards(rows, completions)))

    @torch.inference_mode()
    def step(self, rows: list[dict]) -> None:
        seeds = [int(seed) for seed in self.rng.integers(0, 2**31 - 1, self.population_size)]
        rewards = []
        for seed in seeds:
            self._perturb(seed, self.sigma)
            rewards.append(self._reward(rows))
            self._perturb(seed, -self.sigma)  # restore by regenerating and subtracting
        rewards = np.asarray(rewards)
        normalized = (rewards - rewards.mean()) / (rewards.std() + 1e-8)
        for seed, z in zip(seeds, normalized):  # the update, accumulated seed by seed
            self._perturb(seed, self.learning_rate / self.population_size * float(z))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--population-size", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=10)
    parser.add_argument("--sigma", type=float, default=1e-3)  # the paper's
    parser.add_argument("--learning-rate", type=float, default=5e-4)  # the paper's (sigma folded in)
    parser.add_argument("--repeats", type=int, default=3)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    config = TrainConfig(model=args.model, dtype=args.dtype, task="arithmetic", population_size=args.population_size,
                         antithetic=False, sigma=args.sigma, learning_rate=args.learning_rate, noise="gaussian",
                         batch_size=args.batch_size, max_new_tokens=args.max_new_tokens, iterations=10_000,
                         report_to=[], num_eval=8, optimizer="sgd", shared_prefix=True)
    trainer = Trainer(config, tempfile.mkdtemp(prefix="evotune-peer-"))
    model, tokenizer = load_model(args.model, args.dtype, "cpu")
    for loaded in (model, trainer.backend.model):
        loaded.generation_config.min_new_tokens = args.max_new_tokens  # the same tokens in every arm
    peer = PaperLoop(model.eval(), tokenizer, get_task("arithmetic"), args.population_size, args.sigma,
                     args.learning_rate, args.max_new_tokens)

    def evotune_plain() -> None:
        trainer.backend.shared_prefix = False
        try:
            trainer.step()
        finally:
            trainer.backend.shared_prefix = True

    arms = {"evotune": trainer.step, "evotune_shared_prefix_off": evotune_plain,
            "paper_loop": lambda: peer.step(trainer.batch_rows(trainer.strategy.iteration))}
    times: dict[str, list[float]] = {name: [] for name in arms}
    peer._reward(trainer.batch_rows(0))  # warm-up
    for repeat in range(args.repeats):
        names = list(arms)[repeat % len(arms):] + list(arms)[:repeat % len(arms)]  # rotate the order
        for name in names:
            started = time.perf_counter()
            arms[name]()
            times[name].append(time.perf_counter() - started)
    median = statistics.median
    ratio = {name: round(median(p / t for p, t in zip(times["paper_loop"], times[name])), 3)
             for name in ("evotune", "evotune_shared_prefix_off")}
    write_result("peer_es_at_scale", {
        "command": "OMP_NUM_THREADS=1 python -m bench.speed.peer_es_at_scale " + " ".join(sys.argv[1:]),
        "model": args.model, "dtype": args.dtype, "task": "arithmetic", "population_size": args.population_size,
        "batch_size": args.batch_size, "max_new_tokens": args.max_new_tokens, "fixed_length_generation": True,
        "iteration_s": {name: [round(t, 3) for t in values] for name, values in times.items()},
        "paper_loop_over_evotune_median": ratio}, study="speed")


if __name__ == "__main__":
    main()

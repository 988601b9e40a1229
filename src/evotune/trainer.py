"""The ES loop: ask -> evaluate -> tell -> update -> log -> checkpoint, with exact resume."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from .builders import ADAPTER_SPACES, build_evaluator, build_space, build_strategy, load_backend
from .checkpoint import find_checkpoint, load_checkpoint, load_state, save_checkpoint
from .config import TrainConfig
from .errors import ConfigError
from .spaces import derive_seed
from .tasks import Task, get_task
from .tracking import MetricsLogger, plot_curves


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"`device` is {device!r} but CUDA is not available; set `device: cpu` (or auto).")
    return device


def peak_memory_mib() -> float:
    """Peak resident memory of this process so far (Linux ru_maxrss is in KiB), plus CUDA's peak."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if torch.cuda.is_available():
        peak += torch.cuda.max_memory_allocated() / 2**20
    return round(peak, 1)


def build_task(config: TrainConfig) -> Task:
    return get_task(config.task, seed=config.seed, num_eval=config.num_eval, dataset=config.dataset,
                    eval_dataset=config.eval_dataset, reward_fns=config.reward_fns or None,
                    reward_weights=config.reward_weights or None, **config.task_args)


def generate_in_chunks(backend: Any, rows: list[dict], max_new_tokens: int, chunk_size: int = 64,
                       **sampling: Any) -> list[str]:
    """Completions for every row's prompt, `chunk_size` prompts per generate call (greedy unless
    sampling arguments such as do_sample=True, temperature, top_p are given)."""
    completions: list[str] = []
    for start in range(0, len(rows), chunk_size):
        chunk = rows[start:start + chunk_size]
        completions.extend(backend.generate([row["prompt"] for row in chunk], max_new_tokens, **sampling))
    return completions


def evaluate_model(backend: Any, task: Task, rows: list[dict], max_new_tokens: int,
                   chunk_size: int = 64) -> tuple[dict[str, float], list[str]]:
    """Greedy completions for held-out rows and the task's metrics (reward, accuracy, ...)."""
    completions = generate_in_chunks(backend, rows, max_new_tokens, chunk_size)
    return task.evaluate(rows, completions), completions


class Trainer:
    """ES on one process (full weights or a LoRA adapter). `backend`/`task` may be passed in (tests, notebooks)."""

    def __init__(self, config: TrainConfig, output_dir: str | Path, resume: bool = False,
                 backend: Any = None, task: Task | None = None):
        self.config = config
        self.output_dir = Path(output_dir)
        self.checkpoint_dir = self.output_dir / "checkpoint"
        existing = find_checkpoint(self.checkpoint_dir)
        if existing and not resume:
            raise ConfigError(f"{self.output_dir} already holds a checkpoint; pass --resume to continue that run, "
                              "or choose a new --output-dir.")
        if resume and not existing:
            raise ConfigError(f"--resume: no checkpoint in {self.checkpoint_dir}; start without --resume.")
        self.output_dir.mkdir(parents=True, exist_ok=True)
        (self.output_dir / "config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
        self.task = task or build_task(config)
        self.backend = backend or load_backend(config, resolve_device(config.device))
        self.space = build_space(config, self.backend)
        self.strategy = build_strategy(config, self.space)
        self.evaluator = build_evaluator(config, self.space, self.backend, self.task, state_fn=self.replica_state,
                                         driver_checksum=self.mean_checksum)
        self.update_log: list[dict] = []
        if existing:
            self._load(existing)
        self.logger = MetricsLogger(self.output_dir, config.report_to,
                                    resume_iteration=self.strategy.iteration if existing else None)

    def _load(self, directory: Path) -> None:
        checkpoint = load_checkpoint(directory)
        self.space.load_state_tensors(checkpoint["space_tensors"])
        self.strategy.load_state_dict(checkpoint["state"]["strategy"])
        if self.optimizer is not None:
            self.optimizer.load_state_dict(checkpoint["state"]["strategy"]["optimizer"],
                                           checkpoint["optimizer_tensors"])
        self.update_log = checkpoint["update_log"]

    @property
    def optimizer(self) -> Any:
        """The optimizer on the mean (OpenES); None for strategies that own their mean (CMA-ES)."""
        return getattr(self.strategy, "optimizer", None)

    def save_checkpoint(self) -> None:
        state = {"iteration": self.strategy.iteration, "strategy": self.strategy.state_dict()}
        save_checkpoint(self.checkpoint_dir, state, self.space.state_tensors(),
                        self.optimizer.tensors() if self.optimizer is not None else {}, self.update_log)

    def batch_indices(self, iteration: int) -> list[int]:
        """Positions in task.train_rows of the prompts every candidate of `iteration` is scored on
        (a pure function of seed and iteration, so remote replicas receive indices, not rows)."""
        count = len(self.task.train_rows)
        rng = np.random.default_rng(derive_seed(self.config.seed, "batch", iteration))
        size = self.config.batch_size
        return [int(index) for index in rng.choice(count, size=size, replace=size > count)]

    def batch_rows(self, iteration: int) -> list[dict]:
        return [self.task.train_rows[index] for index in self.batch_indices(iteration)]

    def replica_state(self) -> dict:
        """How another replica rebuilds this mean: the checkpoint, the updates logged after it, or
        CMA-ES's mean vector (small), never the weights themselves."""
        checkpoint = find_checkpoint(self.checkpoint_dir)
        start = load_state(checkpoint)["iteration"] if checkpoint else 0  # not the tensors: a full model's worth
        mean = self.strategy.mean.tolist() if self.optimizer is None and self.strategy.iteration else None
        return {"checkpoint": str(checkpoint) if checkpoint else None, "mean": mean,
                "log": [entry for entry in self.update_log if entry["iteration"] >= start]}

    def mean_checksum(self) -> str:
        from .distributed.ray import mean_checksum

        return mean_checksum(self.space)

    def evaluate(self) -> dict[str, float]:
        metrics, _ = evaluate_model(self.backend, self.task, self.task.eval_rows, self.config.max_new_tokens)
        return {f"eval/{key}": value for key, value in metrics.items()}

    def step(self) -> dict[str, float]:
        """One iteration; returns its metrics record."""
        started = time.perf_counter()
        iteration = self.strategy.iteration
        indices = self.batch_indices(iteration)
        candidates = self.strategy.ask()
        rewards = self.evaluator.evaluate(candidates, [self.task.train_rows[i] for i in indices],
                                          row_indices=indices)  # (pop,)
        update, metrics = self.strategy.tell(rewards)
        sync = getattr(self.evaluator, "sync", None)  # remote replicas apply the same step
        if update is None:  # CMA-ES moved its own mean: the space adopts it
            self.space.set_mean(self.strategy.mean)
            if sync:
                sync(iteration + 1, mean=self.strategy.mean)
        else:
            self.space.update(update.seeds, update.coefficients, self.optimizer)
            self.update_log.append({"iteration": iteration, "seeds": update.seeds,
                                    "coefficients": update.coefficients})
            if sync:
                sync(iteration + 1, seeds=update.seeds, coefficients=update.coefficients)
        # samples_seen: completions sampled for training so far, the budget axis shared with GRPO runs
        samples = (iteration + 1) * len(candidates) * len(indices)
        return {"iteration": iteration + 1, **metrics, **getattr(self.evaluator, "iteration_metrics", {}),
                "samples_seen": samples, "peak_rss_mib": peak_memory_mib(), "time_s": time.perf_counter() - started}

    def train(self) -> dict[str, float]:
        from tqdm.auto import tqdm

        config = self.config
        last_eval: dict[str, float] = {}
        if self.strategy.iteration == 0:  # the baseline, so the gain is visible
            last_eval = self.evaluate()
            self.logger.log({"iteration": 0, **last_eval})
        bar = tqdm(total=config.iterations, initial=self.strategy.iteration, desc="evotune", unit="it",
                   dynamic_ncols=True)
        try:
            while self.strategy.iteration < config.iterations:
                record = self.step()
                iteration = record["iteration"]
                is_last = iteration == config.iterations
                if is_last or (config.eval_every and iteration % config.eval_every == 0):
                    last_eval = self.evaluate()
                    record.update(last_eval)
                self.logger.log(record)
                if is_last or (config.checkpoint_every and iteration % config.checkpoint_every == 0):
                    self.save_checkpoint()
                bar.update(1)
                bar.set_postfix({"reward": f"{record['reward_mean']:.3f}", "max": f"{record['reward_max']:.3f}",
                                 **{key: f"{value:.3f}" for key, value in last_eval.items()
                                    if key in ("eval/accuracy", "eval/reward")}})
        finally:
            bar.close()
            self.logger.close()
        self.finish()
        return last_eval

    def finish(self) -> None:
        if hasattr(self.evaluator, "close"):
            self.evaluator.close()
        self.space.restore()
        final = str(self.output_dir / "final")
        if self.config.space in ADAPTER_SPACES:  # a standard PEFT adapter; `evotune export --merge` merges it
            self.space.save_adapter(final)
            self.backend.tokenizer.save_pretrained(final)
        elif self.config.backend == "vllm":  # the engine's fp32 mean, written as a plain HF model
            self.backend.save_pretrained(final, self.space.state_tensors())
        else:
            self.backend.save_pretrained(final)
        plot_curves(self.logger.path, self.output_dir / "curves.png",
                    title=f"{self.config.model} on {self.config.task}")

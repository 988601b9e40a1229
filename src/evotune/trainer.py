"""The ES loop: ask -> evaluate -> tell -> update -> callbacks (evaluate, log, checkpoint), with exact resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .backends.base import Backend
from .builders import build_evaluator, build_space, build_strategy, build_task, load_backend, reserve_driver_gpus
from .callbacks import ESCallback, default_callbacks
from .config.checks import resolve_device
from .config.train import TrainConfig
from .distributed.base import Replica
from .errors import EvotuneError, RewardFunctionError
from .evaluation.generation import check_prompt_lengths, eval_budget, eval_record, evaluate_model
from .evaluation.model_card import write_model_card
from .evaluation.retention import build_retention
from .files.checkpoint import find_checkpoint, load_checkpoint, save_checkpoint
from .runs import directory as run_directory
from .seeds import derive_seed
from .tasks import Task
from .tasks.base import function_name, prompt_text
from .tracking.clock import StepClock
from .tracking.tracker import MetricsLogger, out_of_time, peak_memory_mib
from .types import append_update

__all__ = ["Trainer"]


class Trainer:
    """ES on one process (full weights or a LoRA adapter), or driving a Ray actor pool.

    `backend`/`task` may be passed in (tests, notebooks); `callbacks` are added to the built-in
    evaluation, logging, checkpoint and progress callbacks (see evotune.callbacks).
    """

    def __init__(self, config: TrainConfig, output_dir: str | Path, resume: bool = False,
                 backend: Backend | None = None, task: Task | None = None,
                 callbacks: list[ESCallback] | None = None, overwrite: bool = False):
        self.config = config
        self.output_dir = Path(output_dir)
        self.checkpoint_dir = self.output_dir / "checkpoint"
        # nothing is written until train(): here the directory is only checked (a refusal leaves it as it was)
        self.run = run_directory.train_run(output_dir, config, resume, overwrite)
        existing = self.run.inspect()
        self.update_log: list[dict] = []
        self.training_seconds = 0.0  # summed over resumes, for max_training_seconds
        self.last_step_seconds = 0.0  # this process's last iteration: where max_training_seconds stops
        self._build(backend, task)
        if existing:
            self._load(existing)
        self.logger: MetricsLogger | None = None  # opened with the run, in train()
        built_in = default_callbacks()  # evaluation first, the user's next, then metrics, samples, checkpoint, progress
        self.callbacks: list[ESCallback] = [built_in[0], *(callbacks or []), *built_in[1:]]
        self.should_stop = False
        self.activity = "iteration"  # what train() was doing: stopped_where() says it if the run stops
        self.last_eval: dict[str, float] = {}
        self.last_completions: list[str] = []  # of the last evaluation, one per task.eval_rows (SamplesCallback)

    def _build(self, backend: Backend | None, task: Task | None) -> None:
        """The loop's parts from the config (or the backend/task passed in), checked against each other."""
        config = self.config
        self.task = task or build_task(config)
        # with Ray and GPUs, the driver's replica takes GPUs no actor will be given
        reservation, device = reserve_driver_gpus(config) if backend is None else (None, None)
        self.backend = backend or load_backend(config, device or resolve_device(config.device))
        self.eval_max_new_tokens = eval_budget(self.task, config.max_new_tokens, config.eval_max_new_tokens)
        check_prompt_lengths(self.backend, {"training": self.task.train_rows}, config.max_new_tokens)
        check_prompt_lengths(self.backend, {"held-out": self.task.eval_rows}, self.eval_max_new_tokens)
        self.space = build_space(config, self.backend)
        self.strategy = build_strategy(config, self.space)
        self.retention = build_retention(config, self.backend)  # after build_space: an adapter space's PEFT model
        replica = Replica(self.task, self.backend, self.space, config.max_new_tokens)
        self.evaluator = build_evaluator(config, replica, state_fn=self.replica_state, driver_reservation=reservation)

    def _load(self, directory: Path) -> None:
        checkpoint = load_checkpoint(directory)
        state = checkpoint["state"]
        self.space.load_state_tensors(checkpoint["space_tensors"])
        # Checkpoints of earlier versions kept the optimizer's counters in the strategy's state.
        space_state = state.get("space") or {key: value for key, value in state["strategy"].items()
                                             if key == "optimizer"}
        self.space.load_state_dict(space_state, checkpoint["optimizer_tensors"])
        self.strategy.load_state_dict(state["strategy"])
        self.update_log = checkpoint["update_log"]
        self.training_seconds = float(state.get("training_seconds", 0.0))
        if not self.space.mean_is_finite():
            raise EvotuneError(f"the checkpoint in {directory} holds NaN or infinite weights; it cannot be resumed. "
                               "Start a new run (e.g. with a smaller learning_rate or sigma).")

    def save_checkpoint(self) -> None:
        state = {"iteration": self.strategy.iteration, "strategy": self.strategy.state_dict(),
                 "space": self.space.state_dict(), "training_seconds": self.training_seconds}
        save_checkpoint(self.checkpoint_dir, state, self.space.state_tensors(), self.space.optimizer_tensors(),
                        self.update_log)

    def batch_indices(self, iteration: int) -> list[int]:
        """Positions in task.train_rows of the prompts every candidate of `iteration` is scored on
        (a pure function of the data seed and iteration, so remote replicas receive indices, not rows)."""
        count = len(self.task.train_rows)
        rng = np.random.default_rng(derive_seed(self.config.data_seed_or_seed, "batch", iteration))
        size = self.config.batch_size
        return [int(index) for index in rng.choice(count, size=size, replace=size > count)]

    def batch_rows(self, iteration: int) -> list[dict]:
        return [self.task.train_rows[index] for index in self.batch_indices(iteration)]

    def replica_state(self) -> dict:
        """How another replica rebuilds this mean: the checkpoint and the update log (seeds and
        coefficients, or CMA-ES's small mean), never the weights themselves. The whole log goes along:
        the replica replays only what follows the checkpoint it actually loads, which may be newer (a save
        in between) or older (a damaged newest one) than the one named here."""
        checkpoint = find_checkpoint(self.checkpoint_dir)
        return {"checkpoint": str(checkpoint) if checkpoint else None, "log": list(self.update_log)}

    def evaluate(self) -> dict[str, float]:
        """Held-out metrics of the current mean, as `eval/<metric>` (and `retain/<task>/<metric>`)."""
        metrics, self.last_completions = evaluate_model(self.backend, self.task, self.task.eval_rows,
                                                        self.eval_max_new_tokens)
        self.last_eval = eval_record(metrics)
        if self.retention is not None:
            self.last_eval.update(self.retention.evaluate(self.backend))
        return self.last_eval

    def run_evaluation(self, record: dict[str, Any]) -> None:
        """Evaluate into `record` and tell every callback (on_evaluate)."""
        record.update(self.evaluate())
        if self.config.log_drift:  # drift/: the mean against its start, from the driver's space (spaces/drift.py)
            record.update(self.space.drift_metrics())
        self._notify("on_evaluate", record)

    def out_of_time(self) -> bool:
        return out_of_time(self.training_seconds, self.config.max_training_seconds, self.last_step_seconds)

    def is_final_iteration(self, iteration: int) -> bool:
        return iteration == self.config.iterations or self.out_of_time()

    def step(self) -> dict[str, float]:
        """One iteration: ask, evaluate, tell, move the mean here and on every replica; its metrics record."""
        clock = StepClock()
        clock.start()
        iteration = self.strategy.iteration
        indices = self.batch_indices(iteration)
        rows = [self.task.train_rows[i] for i in indices]
        population = self.strategy.ask()
        rewards = self.evaluator.evaluate(population, rows, row_indices=indices)  # (pop,)
        if np.isnan(rewards).all():
            raise RewardFunctionError(
                f"iteration {iteration + 1}: the reward functions returned None (skip) for every sample of every "
                f"candidate, so there is nothing to learn from; e.g. for the prompt {rows[0]['prompt']!r}. Check that "
                "they score this task's completions.")
        try:
            update, metrics = self.strategy.tell(rewards)
        except RewardFunctionError as exc:  # the strategy sees only numbers: name the functions and a prompt here
            functions = ", ".join(function_name(fn) for fn in self.task.reward_fns)
            raise RewardFunctionError(f"{exc} Reward functions: {functions}; the batch's first prompt: "
                                      f"{prompt_text(rows[0]['prompt'])[:200]!r}.") from exc
        self.space.apply_update(update)
        # logged before the replicas sync: an actor lost during the sync is rebuilt from this log, this update in it
        self.update_log = append_update(self.update_log, update)
        self.evaluator.sync(update)
        if not self.space.mean_is_finite():
            raise EvotuneError(f"iteration {iteration + 1} made the weights NaN or infinite (learning_rate "
                               f"{self.config.learning_rate}, sigma {self.config.sigma}); nothing was saved from it. "
                               "Start a new run with a smaller learning_rate (the last checkpoint is intact).")
        # samples_seen: completions sampled for training so far, the budget axis shared with GRPO runs
        samples = (iteration + 1) * len(population) * len(indices)
        clock.stop()
        elapsed = clock.seconds(self.config.training_clock)  # what max_training_seconds counts
        self.training_seconds += elapsed
        self.last_step_seconds = elapsed
        return {"iteration": iteration + 1, **metrics, **self.evaluator.iteration_metrics,
                "samples_seen": samples, "peak_rss_mib": peak_memory_mib(), "time_s": clock.wall, "cpu_s": clock.cpu}

    def _notify(self, hook: str, *args: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(self, *args)

    def train(self) -> dict[str, float]:
        """Run to `iterations`, `max_training_seconds` or a callback's should_stop; returns the last eval metrics."""
        self.should_stop = False
        with self.run.opened(self.config, lambda: self.strategy.iteration), \
                run_directory.writes_reported(self.output_dir):
            if self.logger is None:
                resumed = self.strategy.iteration if self.run.checkpoint is not None else None
                self.logger = MetricsLogger(self.output_dir, self.config.report_to, resume_iteration=resumed,
                                            config=self.config.to_dict())
            try:
                self._notify("on_train_begin")
                if self.strategy.iteration == 0:  # the baseline, so the gain is visible
                    self.activity = "evaluating the starting model"
                    self.run_evaluation({"iteration": 0})
                while (self.strategy.iteration < self.config.iterations and not self.should_stop
                       and not self.out_of_time()):
                    self.activity = "iteration"
                    record = self.step()
                    self.activity = "logging, evaluating and checkpointing it"
                    self._notify("on_iteration_end", record)
            except BaseException:
                self._notify("on_train_end")  # the curves of what ran; `activity` keeps where it stopped
                raise
            self.activity = "ending the run (metrics, curves)"
            self._notify("on_train_end")
            self.activity = "writing final/"
            self.finish()
        return self.last_eval

    def stopped_where(self) -> str:
        """Where an interrupted or failed train() stopped, in words: during an iteration, or after one (writing its
        checkpoint, or final/)."""
        done = self.strategy.iteration
        if self.activity == "iteration":
            return f"stopped during iteration {done + 1}"
        return f"stopped after iteration {done}, while {self.activity}"

    def finish(self) -> None:
        """Release workers; write final/ (a model, or a PEFT adapter for adapter spaces) with its model card
        (curves.png was written by MetricsCallback.on_train_end)."""
        self.evaluator.close()
        with self.run.staged("final") as final:  # moved into place whole: a kill leaves the earlier final/ or none
            self.space.save_pretrained(final, self.backend)
            write_model_card(self.output_dir, self.config, self.task, Path(final) / "README.md")

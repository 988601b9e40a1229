"""The loop's side work as callbacks: evaluation, logging, checkpoints, the progress bar.

As TRL's `TrainerCallback` and evotorch's logger hooks, each piece of side work is a callback on
`Trainer.train`, so a user adds their own (early stopping, a custom logger) without
editing the trainer. The base class is `ESCallback`, not `TrainerCallback`: its hooks take other
arguments than transformers' class of that name, which a TRL user might otherwise subclass by mistake.
Callbacks see the loop through the `ESLoop` protocol (the members below), not through the `Trainer`
class, so this module does not depend on the trainer and a test double is checked against the same contract.
Callbacks run in list order; the built-ins come first (evaluation fills the
record), then the user's, then logging and checkpointing (so both see what the user added):

    Trainer(config, "runs/x", callbacks=[EarlyStopping("eval/accuracy", patience=3)]).train()

A callback may set `trainer.should_stop = True`; the loop then ends after this iteration, writes
a checkpoint and the final model, as at the last iteration.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .config.train import TrainConfig
from .strategies.base import Strategy
from .tasks.base import Task, prompt_text
from .tracking.tracker import CurvesRedraw, MetricsLogger, dumps_strict, projected_iterations


@runtime_checkable
class ESLoop(Protocol):
    """What a callback may read and call on the running loop (`evotune.trainer.Trainer` implements it)."""

    config: TrainConfig
    output_dir: Path
    logger: MetricsLogger
    strategy: Strategy
    task: Task
    last_completions: list[str]  # of the last evaluation, one per task.eval_rows
    should_stop: bool  # set True to end the run after this iteration (checkpoint and final/ are written)
    training_seconds: float  # spent so far in `training_clock`'s seconds, summed over resumes

    def run_evaluation(self, record: dict[str, Any]) -> None:
        """Evaluate the current mean into `record` and tell every callback (on_evaluate)."""

    def save_checkpoint(self) -> None:
        """Write a resumable checkpoint of the current state."""

    def is_final_iteration(self, iteration: int) -> bool:
        """Whether `iteration` is the run's last (by `iterations` or `max_training_seconds`)."""


class ESCallback:
    """Hooks of the ES loop; each default does nothing. `record` is the iteration's metrics dict
    (`iteration`, `reward_mean`, ..., and `eval/<metric>` when evaluated); callbacks may add keys."""

    def on_train_begin(self, trainer: ESLoop) -> None:
        """Before the first iteration of this process (after a resume too)."""

    def on_evaluate(self, trainer: ESLoop, record: dict[str, Any]) -> None:
        """After a held-out evaluation; record holds its `eval/` metrics (iteration 0: the baseline)."""

    def on_iteration_end(self, trainer: ESLoop, record: dict[str, Any]) -> None:
        """After each iteration's update (and evaluation, when one was due)."""

    def on_train_end(self, trainer: ESLoop) -> None:
        """After the last iteration (or a stop), before final/ is written; also on error."""


class EvaluationCallback(ESCallback):
    """Held-out evaluation every `eval_every` iterations and at the end (the trainer evaluates the
    baseline at iteration 0 itself, after every on_train_begin, so the gain is always visible)."""

    def on_iteration_end(self, trainer: ESLoop, record: dict[str, Any]) -> None:
        every = trainer.config.eval_every
        if trainer.is_final_iteration(record["iteration"]) or (every and record["iteration"] % every == 0):
            trainer.run_evaluation(record)


class MetricsCallback(ESCallback):
    """metrics.jsonl (the CLI contract) and the configured loggers, through `trainer.logger`; curves.png from
    metrics.jsonl, redrawn after evaluations while the run trains (see CurvesRedraw) and at its end."""

    curves: CurvesRedraw | None = None

    def on_train_begin(self, trainer: ESLoop) -> None:
        self.curves = CurvesRedraw(trainer.logger.path, trainer.output_dir / "curves.png",
                                   title=f"{trainer.config.model} on {trainer.config.task}")

    def on_evaluate(self, trainer: ESLoop, record: dict[str, Any]) -> None:
        if record["iteration"] == 0:  # iteration records are logged whole in on_iteration_end
            trainer.logger.log(record)
            self._curves(trainer).update()

    def on_iteration_end(self, trainer: ESLoop, record: dict[str, Any]) -> None:
        trainer.logger.log(record)
        if any(key.startswith("eval/") for key in record):  # an evaluation: curves.png shows it while training
            self._curves(trainer).update()

    def _curves(self, trainer: ESLoop) -> CurvesRedraw:
        if self.curves is None:  # a loop driven without on_train_begin (a test's or a user's own loop)
            self.on_train_begin(trainer)
        return self.curves

    def on_train_end(self, trainer: ESLoop) -> None:
        """curves.png from metrics.jsonl, sent to the loggers as their last entry, then the loggers closed."""
        try:
            curves = self._curves(trainer).draw()
            if curves is not None:
                try:
                    trainer.logger.log_image("curves", curves, trainer.strategy.iteration)
                except Exception as exc:  # noqa: BLE001 - a logger must not hide the run's own error or lose the logs
                    warnings.warn(f"could not log curves.png: {exc}", stacklevel=2)
        finally:
            trainer.logger.close()


class SamplesCallback(ESCallback):
    """At every evaluation, the first `count` held-out prompts with the mean's greedy completions and their
    rewards: appended to DIR/samples.jsonl (`iteration`, `prompt`, `completion`, `reward`) and sent to the
    loggers as a table, so the model's change is visible, not only its metrics. The prompts are the same
    at every evaluation. `count` defaults to the config's `log_samples` (0: off)."""

    FILE = "samples.jsonl"

    def __init__(self, count: int | None = None) -> None:
        self.count = count

    def _count(self, trainer: ESLoop) -> int:
        return self.count if self.count is not None else trainer.config.log_samples

    def on_train_begin(self, trainer: ESLoop) -> None:
        """A new run starts the file; a resumed one drops rows past its checkpoint (as metrics.jsonl)."""
        path = trainer.output_dir / self.FILE
        iteration = trainer.strategy.iteration
        if iteration == 0 or not path.exists():
            if iteration == 0 and path.exists():
                path.write_text("")
            return
        kept = []
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
            except ValueError:  # a line torn by a kill mid-write
                continue
            if isinstance(row, dict) and isinstance(row.get("iteration"), int) and row["iteration"] <= iteration:
                kept.append(line + "\n")
        path.write_text("".join(kept), encoding="utf-8")

    def on_evaluate(self, trainer: ESLoop, record: dict[str, Any]) -> None:
        count = min(self._count(trainer), len(trainer.last_completions))
        if count <= 0:
            return
        rows = trainer.task.eval_rows[:count]
        completions = trainer.last_completions[:count]
        rewards = trainer.task.rewards(rows, completions)
        samples = [{"iteration": record["iteration"], "prompt": prompt_text(row["prompt"]), "completion": completion,
                    "reward": float(reward)} for row, completion, reward in zip(rows, completions, rewards)]
        with (trainer.output_dir / self.FILE).open("a", encoding="utf-8") as handle:
            handle.writelines(dumps_strict(sample, ensure_ascii=False) + "\n" for sample in samples)
        trainer.logger.log_samples(record["iteration"], samples)


class CheckpointCallback(ESCallback):
    """A resumable checkpoint every `checkpoint_every` iterations, at the end and when stopped early."""

    def on_iteration_end(self, trainer: ESLoop, record: dict[str, Any]) -> None:
        every = trainer.config.checkpoint_every
        iteration = record["iteration"]
        if trainer.is_final_iteration(iteration) or trainer.should_stop or (every and iteration % every == 0):
            trainer.save_checkpoint()


class ProgressCallback(ESCallback):
    """A tqdm bar with the population's reward and the latest held-out accuracy or reward."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.last_eval: dict[str, float] = {}

    def on_train_begin(self, trainer: ESLoop) -> None:
        from tqdm.auto import tqdm

        config, done = trainer.config, trainer.strategy.iteration
        total = projected_iterations(config.iterations, done, trainer.training_seconds, config.max_training_seconds)
        self.bar = tqdm(total=total, initial=done, desc="evotune", unit="it", dynamic_ncols=True)

    def on_evaluate(self, trainer: ESLoop, record: dict[str, Any]) -> None:
        self.last_eval = {key: value for key, value in record.items() if key in ("eval/accuracy", "eval/reward")}

    def on_iteration_end(self, trainer: ESLoop, record: dict[str, Any]) -> None:
        budget = trainer.config.max_training_seconds
        self.bar.total = projected_iterations(trainer.config.iterations, record["iteration"], trainer.training_seconds,
                                              budget)
        self.bar.update(1)
        # the seconds trained of the budget stand beside the bar, in the clock the budget counts
        spent = {"trained": f"{trainer.training_seconds:,.0f}/{budget:,.0f} {trainer.config.training_clock} s"}
        self.bar.set_postfix({"reward": f"{record['reward_mean']:.3f}", "max": f"{record['reward_max']:.3f}",
                              **{key: f"{value:.3f}" for key, value in self.last_eval.items()},
                              **(spent if budget else {})})

    def on_train_end(self, trainer: ESLoop) -> None:
        if self.bar is not None:
            self.bar.close()


class EarlyStopping(ESCallback):
    """Stop when `metric` (an eval/ key, higher is better) has not improved by `min_delta` for
    `patience` evaluations."""

    def __init__(self, metric: str = "eval/accuracy", patience: int = 3, min_delta: float = 0.0):
        self.metric, self.patience, self.min_delta = metric, patience, min_delta
        self.best = float("-inf")
        self.stale = 0

    def on_evaluate(self, trainer: ESLoop, record: dict[str, Any]) -> None:
        value = record.get(self.metric)
        if value is None:
            return
        if value > self.best + self.min_delta:
            self.best, self.stale = value, 0
        elif record["iteration"] > 0:
            self.stale += 1
            if self.stale >= self.patience:
                trainer.should_stop = True


def default_callbacks() -> list[ESCallback]:
    """The side work every run does; user callbacks go between evaluation and metrics (see module doc)."""
    return [EvaluationCallback(), MetricsCallback(), SamplesCallback(), CheckpointCallback(), ProgressCallback()]

"""A transformers TrainerCallback writing GRPO steps in evotune's metrics.jsonl format.

Per optimizer step: `iteration` (the step), `reward_mean` / `reward_std` (TRL's logged group
rewards), `samples_seen` (completions sampled so far), `time_s` (the step's wall time),
`peak_rss_mib`, TRL's own diagnostics (kl, completion length, ...) under `grpo/`, and the
greedy held-out `eval/<metric>` (with `retention_tasks`, also `retain/<task>/<metric>`, as `evotune train`
logs them) before training, every `eval_every` steps and at the end. With
`max_training_seconds`, training stops (evaluated, as at the last step) at the step boundary nearest it, by the
same rule as `evotune train` (tracking.tracker.out_of_time), so both methods can be run for the same minutes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from transformers import TrainerCallback

from ..backends.base import Backend
from ..evaluation.generation import eval_budget, eval_record, evaluate_model
from ..tasks.base import Task
from ..tracking.clock import StepClock
from ..tracking.tracker import CurvesRedraw, MetricsLogger, out_of_time, peak_memory_mib, projected_iterations

if TYPE_CHECKING:
    from ..evaluation.retention import Retention


class EvalSchedule(Protocol):
    """The keys of a GRPO run's config this callback reads."""

    max_new_tokens: int  # the training budget: the floor of the evaluation budget
    eval_max_new_tokens: int | None  # greedy held-out evaluation (None: the task's own budget)
    eval_every: int  # steps between evaluations (0: before and after training only)
    max_training_seconds: float  # 0: no time budget
    training_clock: str  # what the budget counts: wall, or cpu (tracking/clock.py)
    model: str  # named in curves.png's title
    task: str


class EvotuneMetricsCallback(TrainerCallback):
    """GRPO steps as metrics.jsonl records, with evotune's held-out evaluation and time budget (module doc)."""

    def __init__(self, logger: MetricsLogger, task: Task, backend_fn: Callable[[], Backend], config: EvalSchedule,
                 samples_per_step: int, training_seconds: float = 0.0, retention: Retention | None = None,
                 progress_bar: Callable[[], Any] = lambda: None):
        self.logger = logger
        self.progress_bar = progress_bar  # transformers' tqdm bar of the steps, once training has begun (or None)
        self.retention = retention
        self.task = task
        self.backend_fn = backend_fn
        self.config = config
        self.samples_per_step = samples_per_step
        self.last_eval: dict[str, float] = {}
        self._clock = StepClock()
        self._step_time = 0.0  # the last step's seconds on the budget's clock
        self.training_seconds = training_seconds  # summed over steps (and resumes), evaluation excluded
        self.out_of_time = False
        self.curves = CurvesRedraw(logger.path, logger.path.parent / "curves.png",
                                   title=f"GRPO: {config.model} on {config.task}")

    def evaluate(self) -> dict[str, float]:
        budget = eval_budget(self.task, self.config.max_new_tokens, self.config.eval_max_new_tokens)
        backend = self.backend_fn()
        metrics, _ = evaluate_model(backend, self.task, self.task.eval_rows, budget)
        self.last_eval = eval_record(metrics)
        if self.retention is not None:
            self.last_eval.update(self.retention.evaluate(backend))
        return self.last_eval

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step == 0:  # the baseline, so the gain is visible
            self.logger.log({"iteration": 0, **self.evaluate()})

    def on_step_begin(self, args, state, control, **kwargs):
        self._clock.start()

    def on_step_end(self, args, state, control, **kwargs):
        self._clock.stop()
        self._step_time = self._clock.seconds(self.config.training_clock)
        self.training_seconds += self._step_time
        if out_of_time(self.training_seconds, self.config.max_training_seconds, self._step_time):
            # saved too: a resume with a larger budget continues from this step, not from an earlier checkpoint
            self.out_of_time = control.should_training_stop = control.should_save = True
        bar = self.progress_bar()
        if bar is not None:  # its ETA, to where a time budget will stop the run
            bar.total = projected_iterations(state.max_steps, state.global_step, self.training_seconds,
                                             self.config.max_training_seconds)
            bar.refresh()

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "reward" not in logs:  # e.g. the end-of-training summary
            return
        step = state.global_step
        record = {"iteration": step, "reward_mean": float(logs["reward"]),
                  "reward_std": float(logs.get("reward_std", float("nan"))),
                  "samples_seen": step * self.samples_per_step, "peak_rss_mib": peak_memory_mib(),
                  "time_s": self._clock.wall, "cpu_s": self._clock.cpu}
        record.update({f"grpo/{key}": float(value) for key, value in logs.items()
                       if isinstance(value, (int, float)) and key not in ("reward", "reward_std", "epoch")})
        evaluated = (step == state.max_steps or self.out_of_time
                     or (self.config.eval_every and step % self.config.eval_every == 0))
        if evaluated:
            record.update(self.evaluate())
        self.logger.log(record)
        if evaluated:  # curves.png shows the evaluations while the run trains (the run's end draws it whole)
            self.curves.update()

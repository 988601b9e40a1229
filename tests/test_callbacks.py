"""Callbacks on the loop: the built-ins do the side work, a user's callback sees and extends each record."""

from __future__ import annotations

import json

from helpers import tiny_config

from evotune.callbacks import EarlyStopping, ESCallback, ESLoop
from evotune.files.checkpoint import find_checkpoint, load_state
from evotune.trainer import Trainer


class Recorder(ESCallback):
    """Records every hook call and adds a key to each iteration's record."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int | None]] = []

    def on_train_begin(self, trainer) -> None:
        self.calls.append(("begin", trainer.strategy.iteration))

    def on_evaluate(self, trainer, record) -> None:
        self.calls.append(("evaluate", record["iteration"]))

    def on_iteration_end(self, trainer, record) -> None:
        self.calls.append(("iteration", record["iteration"]))
        record["custom/seen"] = len(self.calls)  # logged, since user callbacks run before the metrics logger

    def on_train_end(self, trainer) -> None:
        self.calls.append(("end", trainer.strategy.iteration))


def test_user_callback_sees_every_hook_and_its_keys_are_logged(tiny_model_dir, tmp_path):
    recorder = Recorder()
    Trainer(tiny_config(tiny_model_dir, iterations=3, eval_every=2, report_to=[]), tmp_path / "run",
            callbacks=[recorder]).train()
    assert recorder.calls == [("begin", 0), ("evaluate", 0), ("iteration", 1), ("evaluate", 2), ("iteration", 2),
                              ("evaluate", 3), ("iteration", 3), ("end", 3)]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1, 2, 3]
    assert all("custom/seen" in r for r in records[1:])
    assert "eval/reward" in records[2] and "eval/reward" not in records[1]


class StopAfter(ESCallback):
    def __init__(self, iteration: int):
        self.iteration = iteration

    def on_iteration_end(self, trainer, record) -> None:
        if record["iteration"] == self.iteration:
            trainer.should_stop = True


def test_should_stop_ends_the_run_with_a_checkpoint_and_a_final_model(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    trainer = Trainer(tiny_config(tiny_model_dir, iterations=10, checkpoint_every=0, report_to=[]), run,
                      callbacks=[StopAfter(2)])
    trainer.train()
    assert trainer.strategy.iteration == 2
    assert load_state(find_checkpoint(run / "checkpoint"))["iteration"] == 2  # resumable where it stopped
    assert (run / "final" / "config.json").exists()


class FakeLoop:
    """A stand-in for the trainer with exactly the members of the ESLoop contract, nothing else."""

    def __init__(self) -> None:
        self.config, self.output_dir, self.logger, self.strategy, self.task = None, None, None, None, None
        self.last_completions: list[str] = []
        self.should_stop = False
        self.training_seconds = 0.0

    def run_evaluation(self, record) -> None:
        pass

    def save_checkpoint(self) -> None:
        pass

    def is_final_iteration(self, iteration: int) -> bool:
        return False


def test_the_trainer_and_the_fake_both_meet_the_callback_contract(tiny_model_dir, tmp_path):
    assert isinstance(FakeLoop(), ESLoop)
    trainer = Trainer(tiny_config(tiny_model_dir, iterations=1, report_to=[]), tmp_path / "run")
    assert isinstance(trainer, ESLoop)
    # a fake without one member of the contract is caught here, not by a callback at run time
    incomplete = type("IncompleteLoop", (), {k: v for k, v in vars(FakeLoop).items() if k != "save_checkpoint"})
    assert not isinstance(incomplete(), ESLoop)


def test_early_stopping_counts_evaluations_without_improvement():
    stopper, trainer = EarlyStopping("eval/accuracy", patience=2), FakeLoop()
    for iteration, value in enumerate([0.1, 0.3, 0.3, 0.2]):
        stopper.on_evaluate(trainer, {"iteration": iteration, "eval/accuracy": value})
        assert trainer.should_stop == (iteration == 3)
    stopper.on_evaluate(trainer, {"iteration": 4})  # a record without the metric changes nothing
    assert stopper.stale == 2


def test_the_progress_bar_shows_the_seconds_trained_of_a_time_budget(tiny_model_dir, tmp_path, capsys):
    # a time-budgeted run sets `iterations` far past where it stops, so the bar's own ETA says nothing
    config = tiny_config(tiny_model_dir, iterations=1, eval_every=0, report_to=[], max_training_seconds=3600,
                         training_clock="cpu")
    Trainer(config, tmp_path / "budget").train()
    bar = capsys.readouterr().err
    assert "/3,600 cpu s" in bar and "trained=" in bar


def test_a_time_budgeted_bar_ends_where_the_budget_will_stop_the_run():
    from types import SimpleNamespace

    from evotune.callbacks import ProgressCallback, projected_iterations

    # 10 of a 10,000,000-iteration run in 60 of 600 seconds: the budget stops it near 100
    assert projected_iterations(10_000_000, 10, 60.0, 600.0) == 100
    assert projected_iterations(50, 10, 60.0, 600.0) == 50  # `iterations` comes first
    assert projected_iterations(10_000_000, 10, 700.0, 600.0) == 10  # past the budget: this one is the last
    assert projected_iterations(500, 0, 0.0, 600.0) == 500  # nothing measured yet
    assert projected_iterations(500, 10, 60.0, 0.0) == 500  # no budget
    loop = FakeLoop()
    loop.config = SimpleNamespace(iterations=10_000_000, max_training_seconds=600.0, training_clock="cpu")
    loop.strategy = SimpleNamespace(iteration=4)
    loop.training_seconds = 40.0  # a resumed run: 4 iterations in 40 s before this process
    progress = ProgressCallback()
    progress.on_train_begin(loop)
    assert (progress.bar.n, progress.bar.total) == (4, 60)
    loop.training_seconds = 60.0
    progress.on_iteration_end(loop, {"iteration": 5, "reward_mean": 0.5, "reward_max": 1.0})
    assert (progress.bar.n, progress.bar.total) == (5, 50)
    progress.on_train_end(loop)

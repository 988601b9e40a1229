"""A Ray actor's replica rebuilt from a checkpoint and an update log, without Ray: an actor that starts late loads
the run's checkpoint as it is then, which may be newer than the log the driver gave it; the updates the driver
queued for it meanwhile must not be applied twice."""

from __future__ import annotations

from types import SimpleNamespace

from helpers import save_checkpoint_at

from evotune.distributed.ray import ReplicaWorker
from evotune.types import SeedUpdate


class RecordingSpace:
    """What a space is asked to do, in order: loads and the iterations of the updates applied."""

    def __init__(self):
        self.calls: list = []

    def load_state_tensors(self, tensors):
        self.calls.append(("load", int(tensors["w"][0])))

    def load_state_dict(self, state, optimizer_tensors):
        pass

    def replay(self, entries):
        self.calls += [("update", entry["iteration"]) for entry in entries]

    def apply_update(self, update):
        self.calls.append(("update", update.iteration))


def worker(state: dict) -> tuple[ReplicaWorker, RecordingSpace]:
    space = RecordingSpace()
    return ReplicaWorker(lambda: SimpleNamespace(space=space), state), space


def update(iteration: int) -> SeedUpdate:
    return SeedUpdate(iteration, [iteration], [0.5])


def test_updates_queued_before_a_newer_checkpoint_loaded_are_not_applied_twice(tmp_path):
    log = [{"iteration": i, "seeds": [i], "coefficients": [0.5]} for i in range(3)]  # the driver's log at spawn
    save_checkpoint_at(tmp_path / "checkpoint", 6)  # written while the actor started: updates 0..5 are in it
    replica, space = worker({"checkpoint": str(tmp_path / "checkpoint"), "log": log})
    for iteration in range(3, 8):  # what the driver queued for it meanwhile, then the next ones
        replica.apply_update(update(iteration))
    assert space.calls == [("load", 6), ("update", 6), ("update", 7)]


def test_a_log_past_the_checkpoint_is_replayed_and_the_next_update_applied_once(tmp_path):
    log = [{"iteration": i, "seeds": [i], "coefficients": [0.5]} for i in range(5)]
    save_checkpoint_at(tmp_path / "checkpoint", 3)
    replica, space = worker({"checkpoint": str(tmp_path / "checkpoint"), "log": log})
    replica.apply_update(update(4))  # already replayed from the log
    replica.apply_update(update(5))
    assert space.calls == [("load", 3), ("update", 3), ("update", 4), ("update", 5)]


def test_without_a_checkpoint_the_whole_log_is_replayed(tmp_path):
    log = [{"iteration": i, "seeds": [i], "coefficients": [0.5]} for i in range(2)]
    replica, space = worker({"checkpoint": None, "log": log})
    replica.apply_update(update(2))
    assert space.calls == [("update", 0), ("update", 1), ("update", 2)]

"""The space contract, over every registered space (and VectorSpace) through the `space_case` fixture.

Invariants 1, 2, 5 and 6 of ARCHITECTURE.md: the same member gives the same weights anywhere;
restore() is exact after any number of cycles; sigma = 0 and learning rate 0 change nothing; the
state is small, saved and replayed exactly. What only one space does is in its own test file.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from evotune.errors import ConfigError
from evotune.optimizers import make_optimizer
from evotune.spaces import SPACES
from evotune.strategies import CMAES, OpenES
from evotune.types import Candidate, MeanUpdate, SeedUpdate, append_update

UPDATES = [SeedUpdate(0, [11, 12], [0.3, -0.1]), SeedUpdate(1, [13], [0.2]), SeedUpdate(2, [14, 15], [-0.4, 0.25])]


def assert_bit_identical(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    """Same names, dtypes and bytes (stricter than ==: tells -0.0 from 0.0, and compares NaNs)."""
    assert set(actual) == set(expected)
    for name in expected:
        a, b = actual[name].detach().contiguous(), expected[name].detach().contiguous()
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert torch.equal(a.view(-1).view(torch.uint8), b.view(-1).view(torch.uint8)), name


def differs(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> set[str]:
    return {name for name in expected if not torch.equal(actual[name], expected[name])}


def test_every_registered_space_has_a_case(all_space_cases):
    """A space added to evotune.spaces.SPACES must get a SETUPS entry in tests/spaces/conftest.py."""
    missing = sorted(case.registered for case in all_space_cases if case.setup is None)
    assert not missing, f"no SETUPS entry in tests/spaces/conftest.py for registered spaces {missing}"
    assert {case.registered for case in all_space_cases} == set(SPACES) | {"vector"}


# --- invariant 1: same member, same weights -------------------------------------------------------

def test_same_member_gives_the_same_weights(space_case):
    subject = space_case.build()
    mean = subject.live()
    subject.space.apply(Candidate(seed=5, scale=0.1))
    first = subject.live()
    assert {name for name in mean if subject.searched(name)} == differs(first, mean)  # every searched tensor
    subject.space.apply(Candidate(seed=6, scale=0.1))
    assert {name for name in mean if subject.searched(name)} == differs(subject.live(), first)
    subject.space.restore()
    subject.space.apply(Candidate(seed=5, scale=0.1))
    assert_bit_identical(subject.live(), first)
    if "mean_vector" in space_case.traits:  # an absolute point (CMA-ES) too
        point = subject.mean_vector() + np.random.default_rng(0).normal(0.0, 0.1, subject.mean_vector().size)
        subject.space.apply(point)
        at_point = subject.live()
        subject.space.apply(Candidate(seed=5, scale=0.1))
        subject.space.apply(point)
        assert_bit_identical(subject.live(), at_point)


def test_same_member_gives_the_same_weights_in_a_fresh_process(space_case, fresh_process_digests):
    subject = space_case.build()
    subject.space.apply(Candidate(seed=123456789, scale=0.1))  # conftest.FRESH_SEED
    assert subject.live_digest() == fresh_process_digests[space_case.case.id]


# --- invariant 2: no drift ------------------------------------------------------------------------

def test_exact_restore_after_many_cycles(space_case):
    subject = space_case.build()
    before, mean = subject.live(), subject.mean()
    rng = np.random.default_rng(0)
    for member in range(100):
        if member % 5 == 4 and "mean_vector" in space_case.traits:  # CMA-ES points too
            subject.space.apply(subject.mean_vector() + rng.normal(0.0, 0.2, subject.mean_vector().size))
        else:
            subject.space.apply(Candidate(seed=member, scale=(-1) ** member * 0.2))
        if member % 7 == 0:
            subject.space.restore()
    subject.space.restore()
    assert_bit_identical(subject.live(), before)
    assert_bit_identical(subject.mean(), mean)


# --- invariant 6: sigma = 0 and learning rate 0 change nothing -----------------------------------

def test_scale_zero_apply_is_a_no_op(space_case):
    subject = space_case.build()
    before = subject.live()
    subject.space.apply(Candidate(seed=3, scale=0.0))
    assert_bit_identical(subject.live(), before)
    strategy = OpenES(population_size=4, sigma=0.0, antithetic=True)  # sigma = 0 through a strategy
    for candidate in strategy.ask():
        subject.space.apply(candidate)
        assert_bit_identical(subject.live(), before)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_learning_rate_zero_update_is_a_no_op(space_case, optimizer):
    subject = space_case.build(optimizer=make_optimizer(optimizer, 0.0))
    before, mean = subject.live(), subject.mean()
    subject.space.apply_update(SeedUpdate(0, [1, 2, 3], [0.5, -0.2, 0.1]))
    assert_bit_identical(subject.live(), before)
    assert_bit_identical(subject.mean(), mean)


# --- updates --------------------------------------------------------------------------------------

def test_seed_update_moves_the_mean_and_writes_the_live_weights(space_case):
    subject = space_case.build()
    before, mean = subject.live(), subject.mean()
    subject.space.apply(Candidate(seed=9, scale=0.1))  # an update starts from the mean, not from this member
    subject.space.apply_update(SeedUpdate(0, [1, 2], [0.5, -0.3]))
    moved = subject.live()
    assert differs(subject.mean(), mean)
    assert {name for name in before if subject.searched(name)} == differs(moved, before)
    subject.space.restore()  # the live weights are the new mean
    assert_bit_identical(subject.live(), moved)
    subject.space.apply(Candidate(seed=9, scale=0.1))
    subject.space.restore()
    assert_bit_identical(subject.live(), moved)


def test_seed_update_without_an_optimizer_is_a_config_error(space_case):
    subject = space_case.build(optimizer=None)
    with pytest.raises(ConfigError, match="optimizer"):
        subject.space.apply_update(SeedUpdate(0, [1], [1.0]))


def test_only_searched_weights_ever_change(space_case):
    """Adapter spaces: the base weights never change, whatever the space is asked to do."""
    subject = space_case.build()
    before = subject.live()
    space = subject.space
    space.apply(Candidate(seed=1, scale=0.5))
    space.apply_update(SeedUpdate(0, [1, 2], [0.5, -0.5]))
    if "mean_vector" in space_case.traits:
        space.apply(subject.mean_vector() + 0.3)
        space.set_mean(subject.mean_vector() - 0.1)
    space.load_state_tensors(space.state_tensors())
    changed = differs(subject.live(), before)
    assert changed and all(subject.searched(name) for name in changed), changed


def test_one_openes_step_moves_the_mean(space_case):
    subject = space_case.build()
    space, start = subject.space, subject.mean()
    strategy = OpenES(population_size=4, sigma=0.1, antithetic=True)
    rewards = []
    for candidate in strategy.ask():
        space.apply(candidate)
        rewards.append(subject.score())
        space.restore()
    update, _ = strategy.tell(rewards)
    space.apply_update(update)
    assert differs(subject.mean(), start)
    if "adapter" in space_case.traits:  # the live factors are the adapter PEFT saves
        assert torch.equal(torch.cat([f.weight.detach().reshape(-1) for f in space.factors]),
                           torch.cat([w.float().reshape(-1) for w in space.adapter_weights().values()]))


# --- invariant 5: small, saved, replayable state --------------------------------------------------

@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_save_step_load_gives_identical_next_steps(space_case, optimizer):
    """state_tensors + state_dict + optimizer_tensors, loaded into a space built from another start
    (another adapter init, other weights): the checkpoint alone decides, Adam's moments included."""
    subject = space_case.build(optimizer=make_optimizer(optimizer, 0.05))
    subject.space.apply_update(UPDATES[0])
    saved_mean, saved_live = subject.mean(), subject.live()
    saved_state = copy.deepcopy(subject.space.state_dict())
    saved_optimizer = {key: value.clone() for key, value in subject.space.optimizer_tensors().items()}
    assert saved_state == {"optimizer": {"step_count": 1}}
    assert bool(saved_optimizer) == (optimizer == "adam")  # Adam's two moments; SGD has none
    for update in UPDATES[1:]:
        subject.space.apply_update(update)

    resumed = space_case.build(optimizer=make_optimizer(optimizer, 0.05), start=7)
    resumed.space.load_state_tensors(saved_mean)
    resumed.space.load_state_dict(saved_state, saved_optimizer)
    assert_bit_identical(resumed.mean(), saved_mean)
    assert_bit_identical(resumed.live(), saved_live)
    assert resumed.space.state_dict() == saved_state
    assert_bit_identical(resumed.space.optimizer_tensors(), saved_optimizer)
    for update in UPDATES[1:]:
        resumed.space.apply_update(update)
    assert_bit_identical(resumed.mean(), subject.mean())
    assert_bit_identical(resumed.live(), subject.live())
    assert_bit_identical(resumed.space.optimizer_tensors(), subject.space.optimizer_tensors())
    assert resumed.space.state_dict() == subject.space.state_dict()
    assert resumed.space.checksum() == subject.space.checksum()

    if optimizer == "adam":  # the moments matter: without them the next steps differ
        forgetful = space_case.build(optimizer=make_optimizer(optimizer, 0.05))
        forgetful.space.load_state_tensors(saved_mean)
        for update in UPDATES[1:]:
            forgetful.space.apply_update(update)
        assert differs(forgetful.mean(), subject.mean())


@pytest.mark.space_cases("model")
def test_loading_the_state_of_another_space_is_a_config_error(space_case):
    subject = space_case.build()
    with pytest.raises(ConfigError):
        subject.space.load_state_tensors({"vector": torch.zeros(3)})


def test_replay_of_the_update_log_rebuilds_the_mean(space_case):
    log = []
    for update in UPDATES:
        log = append_update(log, update)
    log = json.loads(json.dumps(log))  # the log is JSON in checkpoints
    subject = space_case.build()
    base = subject.mean()
    subject.space.replay(log)
    trained, trained_live = subject.mean(), subject.live()
    assert differs(trained, base)
    subject.space.load_state_tensors(base)
    subject.space.replay(log)
    assert_bit_identical(subject.mean(), trained)
    assert_bit_identical(subject.live(), trained_live)
    subject.space.load_state_tensors(base)
    subject.space.replay([{k: v for k, v in entry.items() if k != "kind"} for entry in log])  # earlier logs
    assert_bit_identical(subject.mean(), trained)
    direct = space_case.build()  # the same updates applied one by one, on a replica
    for update in UPDATES:
        direct.space.apply_update(update)
    assert_bit_identical(direct.mean(), trained)


def test_checksum_equal_after_identical_updates_and_different_after_different_ones(space_case):
    a, b, c = space_case.build(), space_case.build(), space_case.build()
    start = a.space.checksum()
    assert b.space.checksum() == start
    a.space.apply(Candidate(seed=4, scale=0.3))  # members do not move the mean
    assert a.space.checksum() == start
    a.space.restore()
    for update in UPDATES[:2]:
        a.space.apply_update(update)
        b.space.apply_update(update)
    c.space.apply_update(UPDATES[0])
    c.space.apply_update(SeedUpdate(1, [13], [0.21]))
    assert a.space.checksum() == b.space.checksum() != start
    assert c.space.checksum() not in (a.space.checksum(), start)


def test_mean_is_finite_is_false_after_a_nan(space_case):
    subject = space_case.build()
    assert subject.space.mean_is_finite()
    diverged = space_case.build()
    diverged.space.apply_update(SeedUpdate(0, [1], [float("nan")]))  # a diverged update writes NaN
    assert not diverged.space.mean_is_finite()
    state = subject.mean()
    name = "vector" if "vector" in state else sorted(state)[0]
    state[name].view(-1)[0] = float("nan")  # a NaN loaded from a checkpoint
    subject.space.load_state_tensors(state)
    assert not subject.space.mean_is_finite()


# --- spaces with a small mean vector (CMA-ES's MeanUpdate) ----------------------------------------

@pytest.mark.space_cases("mean_vector")
def test_point_apply_then_set_mean_round_trip(space_case):
    subject = space_case.build()
    space = subject.space
    point = subject.mean_vector() + np.random.default_rng(1).normal(0.0, 0.1, subject.mean_vector().size)
    space.apply(point)
    applied = subject.live()
    space.restore()
    space.set_mean(point)
    assert_bit_identical(subject.live(), applied)
    assert np.array_equal(subject.mean_vector(), point.astype(np.float32).astype(np.float64))
    space.apply(Candidate(seed=2, scale=0.3))
    space.restore()
    assert_bit_identical(subject.live(), applied)


@pytest.mark.space_cases("mean_vector")
def test_mean_update_is_set_mean(space_case):
    """apply_update(MeanUpdate) adopts the mean like set_mean, and a log holding one replays to it."""
    by_set_mean, by_update, by_replay = space_case.build(), space_case.build(), space_case.build()
    point = by_set_mean.mean_vector() + 0.05
    by_set_mean.space.set_mean(point)
    by_update.space.apply_update(MeanUpdate(0, point.tolist()))
    assert_bit_identical(by_update.mean(), by_set_mean.mean())
    assert_bit_identical(by_update.live(), by_set_mean.live())
    log = append_update(append_update([], MeanUpdate(0, (point + 1.0).tolist())), MeanUpdate(1, point.tolist()))
    assert len(log) == 1  # a mean update supersedes the earlier ones
    by_replay.space.replay(json.loads(json.dumps(log)))
    assert_bit_identical(by_replay.mean(), by_set_mean.mean())
    assert_bit_identical(by_replay.live(), by_set_mean.live())


@pytest.mark.space_cases("mean_vector")
def test_one_cmaes_step_moves_the_mean(space_case):
    subject = space_case.build()
    space, start = subject.space, subject.mean_vector()
    strategy = CMAES(population_size=4, sigma=0.1, initial_mean=start, diagonal=start.size > 500)
    rewards = []
    for point in strategy.ask():
        space.apply(point)
        rewards.append(subject.score())
        space.restore()
    update, _ = strategy.tell(rewards)
    space.apply_update(update)  # a MeanUpdate: the space adopts CMA-ES's mean
    assert np.array_equal(subject.mean_vector(), np.float32(strategy.mean))
    assert not np.array_equal(subject.mean_vector(), start)
    moved = subject.live()
    space.apply(strategy.mean)
    assert_bit_identical(subject.live(), moved)  # the live weights are the new mean

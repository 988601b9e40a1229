"""Work units smaller than a candidate, without Ray: exact combination of shards, and the driver's scheduling
(re-sent stragglers, lost workers) on the simulated pool behind the same evaluator interface."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evotune.distributed.simulated import SimulatedEvaluator, modeled_rewards
from evotune.distributed.units import combine, shard_bounds, unit_rewards
from evotune.strategies import OpenES


def test_any_sharding_combines_to_the_same_mean_bit_for_bit():
    rng = np.random.default_rng(0)
    values = rng.normal(size=37) * 10.0 ** rng.integers(-8, 8, size=37)  # magnitudes where float sums round
    values[[3, 20]] = np.nan  # skipped samples count for nothing
    whole = combine([unit_rewards(values)])
    for shards in (2, 3, 4, 7, 37):
        parts = [unit_rewards(values[start:stop]) for start, stop in shard_bounds(len(values), shards)]
        assert combine(parts) == whole
        assert combine(parts[::-1]) == whole  # shards come back in any order
    assert math.isnan(combine([[float("nan")], []]))


def test_shard_bounds_cover_every_prompt_once():
    for rows, shards in [(32, 3), (5, 8), (64, 32), (1, 1)]:
        bounds = shard_bounds(rows, shards)
        assert [i for start, stop in bounds for i in range(start, stop)] == list(range(rows))
        assert all(stop > start for start, stop in bounds)


def expected_rewards(population, indices) -> np.ndarray:
    return np.array([combine([unit_rewards(modeled_rewards(candidate, indices))]) for candidate in population])


@pytest.fixture
def population():
    return OpenES(population_size=8, sigma=0.1, antithetic=True, seed=0).ask()


def test_units_of_1_2_and_4_shards_give_the_same_rewards(population):
    indices = list(range(100, 132))
    reference = expected_rewards(population, indices)
    for shards in (1, 2, 4):
        pool = SimulatedEvaluator(num_workers=20, unit_seconds=1.0, shards=shards, jitter=0.3, seed=shards)
        assert np.array_equal(pool.evaluate(population, [], row_indices=indices), reference)


def test_more_workers_than_candidates_all_get_units(population):
    pool = SimulatedEvaluator(num_workers=24, unit_seconds=1.0, prompts_per_unit=32 / 3)  # auto: 3 shards each
    pool.evaluate(population, [], row_indices=list(range(32)))
    assert len(pool.done_by) == 24


@pytest.mark.parametrize("slowdown, original_wins", [(50.0, False), (3.5, True)])
def test_a_late_unit_is_sent_again_and_either_copy_gives_the_same_rewards(population, slowdown, original_wins):
    """16 units on 16 workers; worker 0 runs `slowdown` times slower, so its unit is re-sent after 3 median unit
    times. At 50x the copy finishes first, at 3.5x the original does (the copy starts at 3 and takes 1): the
    rewards are the same either way."""
    indices = list(range(16))
    pool = SimulatedEvaluator(num_workers=16, unit_seconds=1.0, prompts_per_unit=8, shards=2, straggler_factor=3.0,
                              slowdown={0: slowdown})
    pool.durations.extend([1.0] * 8)  # an earlier iteration's unit times set the deadline
    rewards = pool.evaluate(population, [], row_indices=indices)
    assert np.array_equal(rewards, expected_rewards(population, indices))
    assert pool.resent == 1 and (pool.done_by[0] == 1) == original_wins
    assert pool.now() == (3.5 if original_wins else 4.0)


def test_a_lost_worker_has_its_unit_re_run_and_its_replacement_takes_work(population):
    indices = list(range(16))
    pool = SimulatedEvaluator(num_workers=4, unit_seconds=1.0, prompts_per_unit=8, shards=2, lose_at={1: 0.5},
                              spawn_seconds=0.25)
    rewards = pool.evaluate(population, [], row_indices=indices)
    assert np.array_equal(rewards, expected_rewards(population, indices))
    assert pool.lost == 1 and 1 not in pool.done_by and pool.done_by[4] >= 1  # worker 4: the replacement


def test_iterations_with_stragglers_jitter_and_many_workers_end_and_agree(population):
    """The benchmark's setting, small: 100 workers, jittered unit times, a slow worker, 6 iterations (a deadline
    that float rounding put a hair after `now` once made the driver poll forever)."""
    pool = SimulatedEvaluator(num_workers=100, unit_seconds=30.0, prompts_per_unit=16, straggler_factor=3.0,
                              jitter=0.1, slowdown={0: 4.0}, seed=1)
    for iteration in range(6):
        indices = list(range(iteration, iteration + 64))
        assert np.array_equal(pool.evaluate(population, [], row_indices=indices),
                              expected_rewards(population, indices))
    assert pool.resent >= 1

"""The values that cross layer boundaries: update round trips and the update log."""

from __future__ import annotations

import json
import pickle

from evotune.types import Candidate, MeanUpdate, SeedUpdate, append_update, update_from_dict, update_to_dict


def test_updates_round_trip_through_json_and_pickle():
    for update in (SeedUpdate(3, [11, 12], [0.25, -1e-7]), MeanUpdate(4, [0.1, -2.5, 1 / 3])):
        assert update_from_dict(json.loads(json.dumps(update_to_dict(update)))) == update
        assert pickle.loads(pickle.dumps(update)) == update
    assert pickle.loads(pickle.dumps(Candidate(7, -0.5))) == Candidate(7, -0.5)


def test_log_entries_of_earlier_versions_are_seed_updates():
    assert update_from_dict({"iteration": 2, "seeds": [5], "coefficients": [0.5]}) == SeedUpdate(2, [5], [0.5])


def test_a_mean_update_supersedes_earlier_mean_updates_only():
    log: list[dict] = []
    log = append_update(log, SeedUpdate(0, [1], [0.5]))
    log = append_update(log, MeanUpdate(1, [0.0, 1.0]))
    log = append_update(log, MeanUpdate(2, [2.0, 3.0]))
    assert [entry["iteration"] for entry in log] == [0, 2]
    assert update_from_dict(log[-1]) == MeanUpdate(2, [2.0, 3.0])

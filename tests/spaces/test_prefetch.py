"""FullParameterSpace(prefetch=True): the next member's weights are written on a worker thread and swapped
in (spaces/prefetch.py). Every test runs the same calls on a plain space and a prefetching one, on two
copies of the tiny model, and compares the bytes of the weights and of the mean."""

from __future__ import annotations

import pytest
import torch

from evotune.distributed import LocalEvaluator
from evotune.errors import ConfigError
from evotune.optimizers import SGD
from evotune.spaces import FullParameterSpace
from evotune.tasks.base import Task
from evotune.types import Candidate, SeedUpdate

# antithetic pairs, as OpenES asks them
MEMBERS = [Candidate(seed, sign * 0.05) for seed in (3, 4, 5) for sign in (1.0, -1.0)]


def weights(model: torch.nn.Module) -> dict[str, bytes]:
    return {name: param.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
            for name, param in model.named_parameters()}


def pair(model_source, noise_kind: str, dtype: str = "bfloat16"):
    """(plain space, prefetching space), each on its own copy of the tiny model."""
    return (FullParameterSpace(model_source.base(dtype), noise_kind=noise_kind, optimizer=SGD(0.1)),
            FullParameterSpace(model_source.base(dtype), noise_kind=noise_kind, optimizer=SGD(0.1), prefetch=True))


@pytest.mark.parametrize("noise_kind", ["gaussian", "rademacher"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_prefetched_members_are_bit_identical_to_applied_ones(model_source, noise_kind, dtype):
    plain, prefetching = pair(model_source, noise_kind, dtype)
    before = weights(plain.model)
    for index, member in enumerate(MEMBERS):
        plain.apply(member)
        prefetching.apply(member)
        prefetching.prefetch(MEMBERS[index + 1] if index + 1 < len(MEMBERS) else None)
        assert weights(prefetching.model) == weights(plain.model), member
        assert weights(plain.model) != before
    plain.restore()
    prefetching.restore()  # swaps in the prefetched mean
    assert weights(prefetching.model) == weights(plain.model) == before
    assert prefetching._prefetcher.pending is None


def test_a_prefetch_for_another_member_is_dropped(model_source):
    plain, prefetching = pair(model_source, "rademacher")
    prefetching.prefetch(MEMBERS[0])
    prefetching.apply(MEMBERS[2])  # not what was prefetched: written the plain way
    plain.apply(MEMBERS[2])
    assert weights(prefetching.model) == weights(plain.model)
    prefetching.prefetch(MEMBERS[3])
    prefetching.restore()
    plain.restore()
    assert weights(prefetching.model) == weights(plain.model)


def test_an_update_after_a_prefetch_moves_the_mean_exactly_as_without(model_source):
    """step() waits for the worker and drops its stale member; the next apply writes from the new mean."""
    plain, prefetching = pair(model_source, "rademacher")
    for space in (plain, prefetching):
        space.apply(MEMBERS[0])
        space.prefetch(MEMBERS[1])
        space.apply_update(SeedUpdate(0, [3, 4], [0.5, -0.25]))
        space.prefetch(MEMBERS[2])
        space.apply(MEMBERS[2])
        space.restore()
    assert plain.checksum() == prefetching.checksum()
    assert weights(prefetching.model) == weights(plain.model)


def test_an_error_in_the_worker_is_raised_by_the_next_apply(model_source):
    _, prefetching = pair(model_source, "gaussian")
    prefetching.noise_kind = "no-such-noise"
    prefetching.prefetch(MEMBERS[0])
    with pytest.raises(ValueError, match="unknown noise kind"):
        prefetching.apply(MEMBERS[0])


def test_engine_views_cannot_be_prefetched(model_source):
    model = model_source.base("float32")
    with pytest.raises(ConfigError, match="prefetch_candidates"):
        FullParameterSpace(None, named_tensors=list(model.named_parameters()), prefetch=True)


def test_local_evaluator_gives_the_same_rewards_with_prefetch(tiny_backend, model_source):
    """The loop's own path: LocalEvaluator hints each next member, rewards and the restored mean match."""
    def score(prompts, completions, **_):  # any function of the text: equal completions score equally
        return [float(sum(map(ord, completion)) % 101) for completion in completions]

    rows = [{"prompt": "1+1="}, {"prompt": "2+3="}]
    task = Task(name="text", train_rows=rows, eval_rows=rows, reward_fns=[score], reward_weights=[1.0])
    rewards = []
    for prefetch in (False, True):
        space = FullParameterSpace(tiny_backend.model, noise_kind="rademacher", optimizer=SGD(0.1), prefetch=prefetch)
        before = weights(tiny_backend.model)
        evaluator = LocalEvaluator(space, tiny_backend, task, max_new_tokens=4)
        rewards.append(evaluator.evaluate(MEMBERS, task.train_rows).tolist())
        assert weights(tiny_backend.model) == before
    assert rewards[0] == rewards[1]


def test_training_with_prefetch_candidates_gives_the_same_run(tiny_model_dir, tmp_path):
    """`prefetch_candidates: true` end to end: the same rewards, update log and final mean, bit for bit."""
    from helpers import tiny_config

    from evotune.trainer import Trainer

    runs = []
    for prefetch in (False, True):
        trainer = Trainer(tiny_config(tiny_model_dir, noise="rademacher", report_to=[], prefetch_candidates=prefetch),
                          tmp_path / f"run-{prefetch}")
        assert (trainer.space._prefetcher is not None) == prefetch
        records = [trainer.step() for _ in range(2)]
        runs.append(([(r["reward_mean"], r["reward_std"]) for r in records], trainer.update_log,
                     trainer.space.checksum(), weights(trainer.backend.model)))
    assert runs[0] == runs[1]


def test_prefetch_candidates_outside_space_full_on_hf_is_a_config_error(tiny_model_dir, tmp_path):
    from helpers import tiny_config

    from evotune.trainer import Trainer

    with pytest.raises(ConfigError, match="prefetch_candidates.*space lowrank"):
        Trainer(tiny_config(tiny_model_dir, space="lowrank", report_to=[], prefetch_candidates=True), tmp_path / "run")

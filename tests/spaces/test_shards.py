"""Tensor-parallel shards: a rank's slice of a tensor gets exactly its part of the whole tensor's noise, so
TP ranks together perturb and update exactly what one process does (bit for bit)."""

from __future__ import annotations

import pytest
import torch

import evotune.spaces.full as full
from evotune.errors import ConfigError
from evotune.optimizers import make_optimizer
from evotune.spaces import FullParameterSpace
from evotune.spaces.shards import Shard, assemble, local_slice
from evotune.types import Candidate


def sharded_spaces(whole: torch.Tensor, dim: int, ranks: int, noise: str):
    """One FullParameterSpace per rank over an equal slice of `whole` along `dim`, plus that slice's Shard."""
    size = whole.shape[dim] // ranks
    spaces = []
    for rank in range(ranks):
        piece = whole.narrow(dim, rank * size, size).clone().contiguous()
        shard = Shard(tuple(whole.shape), dim, rank * size)
        spaces.append((FullParameterSpace(None, named_tensors=[("w", piece)], noise_kind=noise,
                                          optimizer=make_optimizer("sgd", 0.1, 0.01), shards={"w": shard}),
                       piece, shard))
    return spaces


def assert_ranks_move_as_the_whole(reference, ranks_spaces, whole: torch.Tensor, base: torch.Tensor,
                                   seeds: list[int], coefficients: list[float]) -> None:
    """Two candidates applied, restored, then one update, on the whole tensor's space (`reference`, over `whole`,
    which starts at `base`) and on every rank's (space, piece, shard): the pieces reassemble to the whole, bit for
    bit, each time."""
    for candidate in (Candidate(7, 0.5), Candidate(8, -0.25)):
        reference.apply(candidate)
        for space, _, _ in ranks_spaces:
            space.apply(candidate)
        assert torch.equal(assemble([(piece, shard) for _, piece, shard in ranks_spaces]), whole)
        assert not torch.equal(whole, base)
    reference.restore()
    for space, piece, shard in ranks_spaces:
        space.restore()
        assert torch.equal(piece, local_slice(base, shard, tuple(piece.shape)))
    for space, _, _ in ranks_spaces:
        space.step(seeds, coefficients)
    reference.step(seeds, coefficients)
    assert not torch.equal(whole, base)
    assert torch.equal(assemble([(piece, shard) for _, piece, shard in ranks_spaces]), whole)


@pytest.mark.parametrize("noise", ["gaussian", "rademacher"])
@pytest.mark.parametrize("shape,dim", [((36, 53), 0), ((36, 54), 1), ((4, 30, 7), 1), ((6, 5, 4), 2)],
                         ids=["rows", "columns", "middle", "last"])
def test_ranks_together_equal_the_whole_tensor(monkeypatch, shape, dim, noise):
    """Chunks of 100 elements (smaller than a row block, not aligned with rows) so that pieces cross chunk
    boundaries: apply, restore and an update on 2 or 3 shards reassemble to the whole tensor's, bit for bit."""
    monkeypatch.setattr(full, "CHUNK_SIZE", 100)
    torch.manual_seed(0)
    base = torch.randn(shape)
    whole = base.clone()
    reference = FullParameterSpace(None, named_tensors=[("w", whole)], noise_kind=noise,
                                   optimizer=make_optimizer("sgd", 0.1, 0.01))
    for ranks in (2, 3) if shape[dim] % 3 == 0 else (2,):
        assert_ranks_move_as_the_whole(reference, sharded_spaces(base, dim, ranks, noise), whole, base, [3, 4],
                                       [0.7, -0.2])
        reference.load_state_tensors({"w": base})


def test_a_shard_that_does_not_fit_its_tensor_is_refused():
    with pytest.raises(ValueError, match="does not fit"):
        Shard((10, 4), 0, 0).layout((5, 3))
    with pytest.raises(ValueError, match="outside"):
        Shard((10, 4), 0, 8).layout((5, 4))


@pytest.mark.parametrize("dim", [0, 1], ids=["row-parallel slice (q/k/v, gate/up)", "column slice (o, down)"])
@pytest.mark.parametrize("ranks", [2, 3])
def test_lowrank_ranks_together_equal_the_whole_weight(dim, ranks):
    """space: lowrank on tensor-parallel shards: each rank's slice of A B^T (rows of A for a row slice, rows of B
    for a column slice) reassembles to the whole weight's perturbation and update, bit for bit (the sharded vLLM
    engine's guarantee that TP=N ends on TP=1's weights)."""
    from evotune.spaces.lowrank import LowRankSpace

    torch.manual_seed(0)
    base = torch.randn(48, 36)
    whole = base.clone()
    reference = LowRankSpace(None, 2, named_tensors=[("layer.weight", whole)],
                             optimizer=make_optimizer("sgd", 0.1, 0.01))
    size = base.shape[dim] // ranks
    pieces = []
    for rank in range(ranks):
        piece = base.narrow(dim, rank * size, size).clone().contiguous()
        shard = Shard(tuple(base.shape), dim, rank * size)
        space = LowRankSpace(None, 2, named_tensors=[("layer.weight", piece)], shards={"layer.weight": shard},
                             optimizer=make_optimizer("sgd", 0.1, 0.01))
        assert space.noise.shapes == reference.noise.shapes  # factors drawn at the whole weight's shape
        pieces.append((space, piece, shard))
    assert_ranks_move_as_the_whole(reference, pieces, whole, base, [3, 4, 5], [0.7, -0.2, 0.1])
    with pytest.raises(ConfigError, match="LoRA requests"):  # a sharded space serves no batched members itself
        pieces[0][0].candidate_factors([Candidate(1, 1.0)])

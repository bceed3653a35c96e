"""Batch order of training: global batches split into shares, auxiliary batches by iteration."""

from __future__ import annotations

import pytest

from vltools.errors import VLToolsError
from vltools.training.samplers import AuxiliaryBatches, GlobalBatchSampler


def test_sampler_splits_each_global_batch_into_shares():
    n, batch = 45, 16
    whole = GlobalBatchSampler(n, batch, shares=1, first=0, count=1, seed=3)
    assert whole.steps == 3
    whole.set_epoch(2)
    global_batches = list(whole)
    assert sorted(i for b in global_batches for i in b) == list(range(n))
    for world_size, accumulate in ((2, 1), (1, 2), (2, 2), (4, 1)):
        shares = world_size * accumulate
        per_rank = []
        for rank in range(world_size):
            sampler = GlobalBatchSampler(n, batch, shares, rank * accumulate, accumulate, seed=3)
            sampler.set_epoch(2)
            per_rank.append(list(sampler))
            assert len(sampler) == len(per_rank[-1]) == 3 * accumulate
        for step, expected in enumerate(global_batches):
            parts = [per_rank[r][step * accumulate + a] for r in range(world_size) for a in range(accumulate)]
            assert [i for part in parts for i in part] == expected
            assert max(map(len, parts)) - min(map(len, parts)) <= 1
    resumed = GlobalBatchSampler(n, batch, 1, 0, 1, seed=3)
    resumed.set_epoch(2, start=1)
    assert list(resumed) == global_batches[1:]
    other = GlobalBatchSampler(n, batch, 1, 0, 1, seed=3)
    other.set_epoch(3)
    assert list(other) != global_batches


@pytest.mark.parametrize("n, shares, steps", [
    (33, 1, 2),   # a last batch of one item: dropped
    (34, 1, 3),   # of two: kept
    (35, 2, 2),   # two shares of 3 items: one of them would be a micro-batch of one
    (36, 2, 3),
    (39, 4, 2),   # 4 processes (or accumulated shares) of 16 + 7 items
    (40, 4, 3),
])
def test_no_micro_batch_of_one_item_whatever_the_shares(n, shares, steps):
    """A micro-batch of one crashes BatchNorm in training mode (SGR's and SAF's VisualSA), so a last global batch
    that would give a share a single item is dropped, for every rank and accumulated share alike."""
    for first in range(shares):
        sampler = GlobalBatchSampler(n, 16, shares, first, 1, seed=5)
        sampler.set_epoch(1)
        micro = list(sampler)
        assert sampler.steps == len(micro) == steps
        assert min(map(len, micro)) >= 2


def test_too_few_items_for_one_batch_is_a_user_error():
    GlobalBatchSampler(4, 16, 2, 0, 1, seed=0)
    with pytest.raises(VLToolsError, match="the training split has 3 items, too few for one batch: each of "
                                           "processes x accumulate = 2 micro-batches needs at least 2"):
        GlobalBatchSampler(3, 16, 2, 0, 1, seed=0)


def test_auxiliary_batches_are_a_function_of_seed_and_iteration_split_into_shares():
    whole = AuxiliaryBatches(10, 4, every=1, shares=1, first=0, count=1, seed=3)
    halves = [AuxiliaryBatches(10, 4, every=1, shares=2, first=rank, count=1, seed=3) for rank in (0, 1)]
    for iteration in range(5):
        joined = halves[0].micro_batches(iteration)[0] + halves[1].micro_batches(iteration)[0]
        assert joined == whole.micro_batches(iteration)[0]
    again = AuxiliaryBatches(10, 4, every=1, shares=1, first=0, count=1, seed=3)
    assert again.micro_batches(7) == whole.micro_batches(7)

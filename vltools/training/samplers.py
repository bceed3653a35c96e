"""Deterministic batch order: each global batch is a function of (seed, epoch) only and is split into
world_size x accumulate shares, so N processes and one process accumulating N shares see the same items;
auxiliary batches (L2C's single-image captions) are a function of (seed, iteration).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from vltools.errors import VLToolsError

MIN_SHARE = 2  # the fewest items of a last batch's micro-batches (see GlobalBatchSampler)


class GlobalBatchSampler(Sampler[list[int]]):
    """Micro-batches of this process, in step order, from a (seed, epoch)-determined permutation.

    Each global batch of `batch_size` indices is split into `shares` nearly equal parts; this process
    takes parts `first, first + 1, ..., first + count - 1` (its rank's `accumulate` micro-batches). A
    last global batch too small to give every share `MIN_SHARE` items is dropped (those items wait for
    the next epoch's order): a micro-batch of one crashes BatchNorm in training (SGR's and SAF's image
    encoders) and gives a contrastive loss no negative. The released SGRAF's DataLoader keeps a last
    batch (no drop_last), but Flickr30K's and COCO's sizes never leave it a single item at batch 128.
    `start` skips whole global batches (resume).
    """

    def __init__(self, n: int, batch_size: int, shares: int, first: int, count: int, seed: int) -> None:
        if batch_size < shares:
            raise VLToolsError(f"batch_size {batch_size} is smaller than processes x accumulate = {shares}; "
                               "raise train.batch_size")
        self.n, self.batch_size, self.shares = n, batch_size, shares
        self.first, self.count, self.seed = first, count, seed
        self.epoch, self.start = 0, 0
        if self.steps == 0:
            raise VLToolsError(f"the training split has {n} items, too few for one batch: each of processes x "
                               f"accumulate = {shares} micro-batches needs at least {MIN_SHARE}")

    @property
    def steps(self) -> int:
        """Optimizer steps per epoch."""
        full, rest = divmod(self.n, self.batch_size)
        return full + (rest >= MIN_SHARE * self.shares)

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.epoch, self.start = epoch, start

    def __len__(self) -> int:
        return (self.steps - self.start) * self.count

    def __iter__(self) -> Iterator[list[int]]:
        generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        order = torch.randperm(self.n, generator=generator).tolist()
        for step in range(self.start, self.steps):
            batch = order[step * self.batch_size:(step + 1) * self.batch_size]
            parts = np.array_split(np.arange(len(batch)), self.shares)
            for part in parts[self.first:self.first + self.count]:
                yield [batch[i] for i in part]


class AuxiliaryBatches:
    """This process's micro-batches of auxiliary items for a global iteration (0-based), every `every` steps.

    The k-th auxiliary batch (iteration k * every) is part k mod c of the permutation number k // c of the
    items (seeded by seed and that number), c = n // batch_size batches per pass; so the batches depend on
    (seed, iteration) only. A batch larger than the data takes all of it.
    """

    def __init__(self, n: int, batch_size: int, every: int, shares: int, first: int, count: int, seed: int) -> None:
        if every < 1:
            raise VLToolsError(f"task.aux_every must be at least 1, not {every}")
        if n < shares:
            raise VLToolsError(f"the auxiliary data has {n} items, fewer than processes x accumulate = {shares}")
        self.n, self.batch_size, self.every = n, max(min(batch_size, n), shares), every
        self.shares, self.first, self.count, self.seed = shares, first, count, seed
        self.per_pass = n // self.batch_size

    def due(self, iteration: int) -> bool:
        return iteration % self.every == 0

    def micro_batches(self, iteration: int) -> list[list[int]]:
        number, part = divmod(iteration // self.every, self.per_pass)
        generator = torch.Generator().manual_seed(self.seed * 100_003 + 7_919 * (number + 1) + 1)
        order = torch.randperm(self.n, generator=generator)[part * self.batch_size:(part + 1) * self.batch_size]
        parts = np.array_split(order.numpy(), self.shares)
        return [part.tolist() for part in parts[self.first:self.first + self.count]]


def fetch(dataset: Dataset, indices: list[int]) -> list:
    """Items `indices` of `dataset`, in one call when it reads batches at once (`__getitems__`)."""
    many = getattr(dataset, "__getitems__", None)
    return many(indices) if many is not None else [dataset[i] for i in indices]

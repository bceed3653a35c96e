"""Random draws of training (and of `caption --sample`) as functions of the seed and of where they happen, never of
a process's generator.

A draw made while fetching data (Contrastive Learning's negative captions, the concept CNN's flips) comes from a
generator keyed by (seed, stream, epoch, item), and one made in a loss (SCO's sampled negatives) from one keyed by
(seed, stream, iteration, share). So the same --seed gives the same draws whatever the number of DataLoader
workers (whose generators torch seeds itself) or of processes, and a resumed run draws what the uninterrupted one
drew, with no generator state to save. `stream` keeps the draws of different purposes apart.
"""

from __future__ import annotations

import hashlib

import numpy as np

# one stream per purpose: two uses of the same (seed, epoch, item) never see the same numbers; SAMPLES: the words
# `caption --sample` draws for a batch, keyed by (seed, its first image)
NEGATIVES, FLIPS, LOSS, SAMPLES = 1, 2, 3, 4


def keyed_rng(seed: int, stream: int, *position: int) -> np.random.Generator:
    """A numpy generator determined by (seed, stream, position...) alone (numpy's SeedSequence mixes them)."""
    return np.random.default_rng([int(seed), int(stream), *(int(p) for p in position)])


def keyed_seed(seed: int, stream: int, *position: int) -> int:
    """A 64-bit seed for `torch.Generator().manual_seed`, determined by (seed, stream, position...) alone."""
    entropy = [int(seed), int(stream), *(int(p) for p in position)]
    return int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0])


def id_key(item_id: str) -> int:
    """A 64-bit position for `keyed_seed` made of an id (its SHA-256), to key draws by the item they are for."""
    return int.from_bytes(hashlib.sha256(item_id.encode("utf-8")).digest()[:8], "little")


class EpochDraws:
    """For a dataset whose items carry random draws: `seed` (train.seed) and the epoch the trainer sets before
    each epoch's data is fetched (`set_epoch`), giving each item its generator (`rng`)."""

    seed: int = 0
    epoch: int = 0

    def set_epoch(self, epoch: int) -> None:
        """Called by the trainer before it fetches an epoch's data (in the main process, before any worker starts)."""
        self.epoch = epoch

    def rng(self, stream: int, index: int) -> np.random.Generator:
        """The generator of item `index` in the current epoch."""
        return keyed_rng(self.seed, stream, self.epoch, index)

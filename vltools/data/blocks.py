"""Inputs served in consecutive padded blocks for batched inference: captions, feature rows, any item list.

A block is what one model call takes; the similarity, rerank and SCO scorers iterate over them.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from vltools.errors import VLToolsError
from vltools.io.features import FeaturesReader
from vltools.text.captions import pad_tokens

# (regions, num_regions or None); SCO's: (context, concepts) and, with generated sentences, their tokens and lengths
ImageBlock = tuple["torch.Tensor | None", ...]


CaptionBlock = tuple[torch.Tensor, torch.Tensor]


class Blocks(Sequence):
    """Items served in consecutive blocks of `batch_size`; subclasses build a block with `take(indices)`."""

    def __init__(self, n_items: int, batch_size: int, what: str) -> None:
        if batch_size < 1:
            raise VLToolsError(f"{what} batch size must be at least 1, not {batch_size}")
        self.n_items = n_items
        self.batch_size = batch_size

    def __len__(self) -> int:
        return -(-self.n_items // self.batch_size)

    @property
    def sizes(self) -> list[int]:
        """Items in each block, known without building any (a block of features is read from disk)."""
        return [min(self.batch_size, self.n_items - start) for start in range(0, self.n_items, self.batch_size)]

    def __getitem__(self, index: int):
        if not 0 <= index < len(self):
            raise IndexError(index)
        start = index * self.batch_size
        return self.take(range(start, min(start + self.batch_size, self.n_items)))

    @abstractmethod
    def take(self, indices: Sequence[int]):
        """The block of the items at `indices`."""


class CaptionBlocks(Blocks):
    """Tokenised captions (each wrapped in <start> ... <end>) served as padded blocks of `batch_size`."""

    def __init__(self, tokens: Sequence[Sequence[int]], batch_size: int) -> None:
        self.tokens = list(tokens)
        super().__init__(len(self.tokens), batch_size, "caption")

    def take(self, indices: Sequence[int]) -> CaptionBlock:
        """A block of any captions, by position (used by reranking to fetch candidates)."""
        return pad_tokens([self.tokens[i] for i in indices])


class FeatureBlocks(Blocks):
    """Region features of `ids` (in that order) read lazily from a features file, `batch_size` images a block.

    Each block is (regions float32 [B, K, D], num_regions [B] or None when the file has fixed K).
    """

    def __init__(self, reader: FeaturesReader, ids: Sequence[str], batch_size: int) -> None:
        super().__init__(len(ids), batch_size, "image")
        if "regions" not in reader.fields:
            raise VLToolsError(f"{reader.path}: has no /regions dataset; matching needs region features "
                               "(vltools extract-regions)")
        reader.rows(ids)
        self.reader = reader
        self.ids = list(ids)
        self.fields = ["regions", "num_regions"] if "num_regions" in reader.fields else ["regions"]

    def take(self, indices: Sequence[int]) -> ImageBlock:
        """A block of any of the images, by position in `ids` (used by reranking to fetch candidates)."""
        arrays = self.reader.read([self.ids[i] for i in indices], self.fields)
        regions = torch.from_numpy(np.asarray(arrays["regions"], dtype=np.float32))
        counts = arrays.get("num_regions")
        return regions, None if counts is None else torch.from_numpy(counts.astype(np.int64))


class BatchedDataset(Dataset):
    """A map-style dataset read a batch at a time (`__getitems__`: one HDF5 read per batch, which DataLoader
    calls with the batch's indices); one item is a batch of one."""

    def __getitem__(self, index: int) -> dict:
        return self.__getitems__([index])[0]

    @abstractmethod
    def __getitems__(self, indices: Sequence[int]) -> list[dict]:
        """The items at `indices`, in that order."""

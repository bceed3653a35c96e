"""L2C's data: image pairs with difference descriptions and single images with captions, both read as
feature maps and foreground masks (`/featmap`, `/mask`) from segment-pool features files.

One training item per description (pairs) or per caption (single images), as captioning loaders do,
with token ids from the caller's `encode`; rows are read from HDF5 when a batch is fetched, never the
whole file. Masks of another size than the feature map are area-resized to it (said once); empty masks
are kept and counted (their nodes are zero).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from vltools.data.blocks import BatchedDataset
from vltools.errors import VLToolsError, argument
from vltools.io.features import FeaturesReader
from vltools.io.hdf5 import read, refuse_nonfinite
from vltools.io.progress import log
from vltools.io.records import read_records
from vltools.text.captions import pad_tokens
from vltools.vision.masks import area_resize

MAP_FIELDS = ("featmap", "mask")
PRELOAD_BYTES = 1 << 30


@dataclass(frozen=True)
class PairSplit:
    """The pairs of one split in first-appearance order, their images, and their descriptions."""

    name: str
    pair_ids: list[str]
    image_a: list[str]
    image_b: list[str]
    descriptions: list[list[str]]  # per pair, possibly empty (pairs to describe, not to train on)

    def __len__(self) -> int:
        return len(self.pair_ids)

    @property
    def image_ids(self) -> list[str]:
        return list(dict.fromkeys(self.image_a + self.image_b))

    def items(self) -> list[tuple[int, str]]:
        """(pair index, description) of every description, in file order within pairs."""
        return [(n, text) for n, texts in enumerate(self.descriptions) for text in texts]


def group_pairs(records: Sequence[dict], name: str, path: str | os.PathLike) -> PairSplit:
    """Pairs records (one per description, or one without description) grouped by pair_id in order."""
    index: dict[str, int] = {}
    image_a: list[str] = []
    image_b: list[str] = []
    descriptions: list[list[str]] = []
    for record in records:
        pair = record["pair_id"]
        if pair not in index:
            index[pair] = len(index)
            image_a.append(record["image_a"])
            image_b.append(record["image_b"])
            descriptions.append([])
        n = index[pair]
        if (image_a[n], image_b[n]) != (record["image_a"], record["image_b"]):
            raise VLToolsError(f"{path}: pair_id {pair!r} names images {record['image_a']!r}, {record['image_b']!r} "
                               f"but earlier {image_a[n]!r}, {image_b[n]!r}; give each pair its own id")
        if record.get("description"):
            descriptions[n].append(record["description"])
    return PairSplit(name, list(index), image_a, image_b, descriptions)


def read_pairs(path: str | os.PathLike, split: str | None, records: Sequence[dict] | None = None,
               need_descriptions: bool = False, chosen_by: str = "split") -> PairSplit:
    """The pairs of `split` (None: all) of a pairs JSONL; with `need_descriptions` every pair must have one.
    `chosen_by` (the argument that chose the split, by its Python name) is named in the error when the split has no
    pairs."""
    records = read_records(path, "pairs") if records is None else records
    chosen = [r for r in records if split is None or r.get("split") == split]
    if not chosen:
        found = sorted({str(r.get("split")) for r in records})
        raise VLToolsError(f"{path}: no pairs in split {split!r} (splits present: {', '.join(found)}); "
                           f"choose one with {argument(chosen_by)}")
    pairs = group_pairs(chosen, split or "all", path)
    if need_descriptions:
        bare = [pid for pid, texts in zip(pairs.pair_ids, pairs.descriptions, strict=True) if not texts]
        if bare:
            raise VLToolsError(f"{path}: pair_id {bare[0]!r}: no description in split {split!r} ({len(bare)} "
                               "pair(s) without one); training and validation pairs need descriptions, drop them")
    return pairs


def check_map_features(features: str | os.PathLike, image_ids: Sequence[str], source: str | os.PathLike,
                       channels: int | None = None, model: object = None) -> None:
    """The features file must have /featmap and /mask and every image of `image_ids`, and (given `channels`,
    what the checkpoint `model` was trained on) feature maps of that many channels; warns once about masks of
    another size than the feature map (resized on reading) and counts empty masks (kept)."""
    with FeaturesReader(features) as reader:
        missing_fields = [name for name in MAP_FIELDS if name not in reader.fields]
        if missing_fields:
            raise VLToolsError(f"{features}: has no /{missing_fields[0]} dataset; L2C reads feature maps and masks "
                               "written by `vltools segment-pool`")
        found = reader.shape("featmap")[1]
        if channels is not None and found != channels:
            raise VLToolsError(f"{features}: feature maps have {found} channels but {model} was trained on "
                               f"{channels}; run segment-pool with the backbone of its training data")
        reader.require(image_ids, source, "run segment-pool over those images or drop their records", "image")
        featmap_size, mask_size = reader.shape("featmap")[2:], reader.shape("mask")[1:]
        if featmap_size != mask_size:
            log.warning("%s: masks are %dx%d but feature maps %dx%d; masks are area-resized to the feature maps",
                        features, *mask_size, *featmap_size)
        rows = np.sort(reader.rows(list(dict.fromkeys(image_ids))))
        empty = int((reader.read_rows("mask", rows).reshape(len(rows), -1).max(axis=1) <= 0).sum())
    if empty:
        log.warning("%s: %d of %d images have an empty mask; they are kept (their L2C nodes are zero)",
                    features, empty, len(rows))


class FeatureMaps:
    """Feature maps (float32) and masks resized to them, read by id from a features file opened lazily in
    each process (h5py handles must not cross a fork, so this works with DataLoader workers).

    A file whose feature maps take at most `preload_bytes` is read into memory once per process; larger
    ones are read row by row (h5py's fancy indexing of scattered rows is several times slower).
    """

    def __init__(self, path: str | os.PathLike, preload_bytes: int = PRELOAD_BYTES) -> None:
        self.path = Path(path)
        self.preload_bytes = preload_bytes
        self._reader: FeaturesReader | None = None
        self._pid: int | None = None
        self._loaded: dict[str, np.ndarray] | None = None

    @property
    def reader(self) -> FeaturesReader:
        if self._reader is None or self._pid != os.getpid():
            self._reader = FeaturesReader(self.path)
            self._pid = os.getpid()
            featmaps = self._reader.handle["featmap"]
            small = featmaps.size * featmaps.dtype.itemsize <= self.preload_bytes
            self._loaded = {name: read(self._reader.handle[name]) for name in MAP_FIELDS} if small else None
        return self._reader

    def _rows(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Rows of `name`, refused when non-finite like every features read (FeaturesReader.read_rows)."""
        reader = self.reader
        if self._loaded is None:
            return reader.read_rows(name, rows)
        block = self._loaded[name][rows]
        refuse_nonfinite(self.path, name, block, reader.ids, rows, "image id")
        return block

    def read(self, ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(featmaps (N, D, H, W), masks (N, H, W)) of `ids`, in that order."""
        rows = self.reader.rows(list(ids))
        featmaps = self._rows("featmap", rows).astype(np.float32, copy=False)
        masks = self._rows("mask", rows).astype(np.float32, copy=False)
        if masks.shape[1:] != featmaps.shape[2:]:
            masks = area_resize(torch.from_numpy(masks), featmaps.shape[2:]).numpy()
        return featmaps, masks

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_reader": None, "_pid": None, "_loaded": None}


class PairDataset(BatchedDataset):
    """One item per description: both images' feature maps and masks, and the description's tokens."""

    def __init__(self, maps: FeatureMaps, pairs: PairSplit, encode: Callable[[str], list[int]]) -> None:
        self.maps, self.pairs = maps, pairs
        self.entries = pairs.items()
        self.tokens = [encode(text) for _, text in self.entries]

    def __len__(self) -> int:
        return len(self.entries)

    def __getitems__(self, indices: Sequence[int]) -> list[dict]:
        pairs = [self.entries[i][0] for i in indices]
        ids = [self.pairs.image_a[p] for p in pairs] + [self.pairs.image_b[p] for p in pairs]
        featmaps, masks = self.maps.read(ids)
        n = len(pairs)
        return [{"featmap_a": featmaps[k], "mask_a": masks[k], "featmap_b": featmaps[n + k], "mask_b": masks[n + k],
                 "tokens": self.tokens[i], "pair_index": pairs[k]} for k, i in enumerate(indices)]


@dataclass(frozen=True)
class ImageCaptions:
    """Single-image captions of one split: texts and their image ids."""

    image_ids: list[str]
    captions: list[str]

    def __len__(self) -> int:
        return len(self.captions)


def read_image_captions(path: str | os.PathLike, split: str) -> ImageCaptions:
    """The captions of `split` from a captions JSONL (CUB converted by `vltools convert cub`, or synth's)."""
    chosen = [r for r in read_records(path, "captions") if r.get("split") == split]
    if not chosen:
        raise VLToolsError(f"{path}: no captions in split {split!r}; the auxiliary task trains on that split "
                           "(set task.aux_split)")
    return ImageCaptions([r["image_id"] for r in chosen], [r["caption"] for r in chosen])


class CaptionDataset(BatchedDataset):
    """One item per single-image caption: its image's feature map and mask, and the caption's tokens."""

    def __init__(self, maps: FeatureMaps, captions: ImageCaptions, encode: Callable[[str], list[int]]) -> None:
        self.maps, self.captions = maps, captions
        self.tokens = [encode(text) for text in captions.captions]

    def __len__(self) -> int:
        return len(self.captions)

    def __getitems__(self, indices: Sequence[int]) -> list[dict]:
        featmaps, masks = self.maps.read([self.captions.image_ids[i] for i in indices])
        return [{"featmap": featmaps[k], "mask": masks[k], "tokens": self.tokens[i]} for k, i in enumerate(indices)]


def _stack(items: Sequence[dict], key: str) -> torch.Tensor:
    return torch.from_numpy(np.stack([item[key] for item in items]))


def collate_pairs(items: Sequence[dict]) -> dict[str, torch.Tensor]:
    """A batch of pair items, in item order."""
    tokens, lengths = pad_tokens([item["tokens"] for item in items])
    batch = {key: _stack(items, key) for key in ("featmap_a", "mask_a", "featmap_b", "mask_b")}
    return {**batch, "tokens": tokens, "lengths": lengths,
            "pair_index": torch.tensor([item["pair_index"] for item in items], dtype=torch.long)}


def collate_images(items: Sequence[dict]) -> dict[str, torch.Tensor]:
    """A batch of single-image caption items, in item order."""
    tokens, lengths = pad_tokens([item["tokens"] for item in items])
    return {"featmap": _stack(items, "featmap"), "mask": _stack(items, "mask"), "tokens": tokens, "lengths": lengths}

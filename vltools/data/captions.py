"""Image-caption pairs for matching models: image regions streamed from a features HDF5 + caption tokens.

One item per caption (as the SCAN / SGRAF loaders do): the regions of its image, read from the
features file when the batch is fetched (never the whole file), and the caption's token ids wrapped
in `<start> ... <end>`. Images are numbered by first appearance in the split, so the collated
`image_index` tells which captions of a batch share an image.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from vltools.data.blocks import BatchedDataset
from vltools.data.converters.scan_vocab import load_vocabulary as read_vocabulary_json
from vltools.errors import VLToolsError, argument, require_file
from vltools.io.bounded import parse_json
from vltools.io.checkpoints import CHECKPOINT_FORMAT, load_checkpoint
from vltools.io.features import FeaturesReader
from vltools.io.records import caption_ids, read_records
from vltools.text.captions import pad_tokens
from vltools.text.vocab import Vocabulary
from vltools.vision.images import ImageItem, list_inputs

VOCAB_THRESHOLD = 4
DEFAULT_SPLIT = "test"  # the split matched, encoded and scored when none is given and the captions have splits


@dataclass(frozen=True)
class CaptionSplit:
    """The captions of one split: texts, their image ids, and the split's images in first-appearance order."""

    name: str
    captions: list[str]
    caption_ids: list[str]
    image_ids: list[str]
    caption_image_index: np.ndarray  # (n_captions,) index into image_ids

    def __len__(self) -> int:
        return len(self.captions)

    def head(self, n: int) -> CaptionSplit:
        """The first `n` captions and their images (the released loader validates on the first 5,000)."""
        index = self.caption_image_index[:n]
        images = list(dict.fromkeys(index.tolist()))
        renumber = {old: new for new, old in enumerate(images)}
        return CaptionSplit(self.name, self.captions[:n], self.caption_ids[:n], [self.image_ids[i] for i in images],
                            np.array([renumber[i] for i in index.tolist()], dtype=np.int64))


def default_split(records: Sequence[dict], default: str = DEFAULT_SPLIT) -> str | None:
    """The split a stage uses when none is given, one rule for every stage (match, encode, score; concepts with
    `default` train): `default` when the captions carry splits, None (every caption) when none does."""
    return default if any("split" in record for record in records) else None


def split_of(records: Sequence[dict], ids: Sequence[str], ranked: Iterable[str]) -> str | None:
    """The split that match ranked, from the caption ids it ranked (`ranked`; `ids` are the records' caption
    ids): the one split holding them all, or None (every caption) when the captions have no splits or the
    ranked captions span several."""
    split_by_id = {i: r.get("split") for i, r in zip(ids, records, strict=True)}
    found = {split_by_id.get(i) for i in ranked}
    return found.pop() if len(found) == 1 and None not in found else None


def read_split(captions_path: str | os.PathLike, split: str | None, records: Sequence[dict] | None = None,
               chosen_by: str = "split", default: str = DEFAULT_SPLIT) -> CaptionSplit:
    """The captions of `split` from a captions JSONL (records without a split are in none); `split` None follows
    `default_split` (the name is then "" when it means every caption).

    `chosen_by` is the argument that chose the split (its Python name, spelled as the caller wrote it: `--split`
    on the command line, `split` from Python), named in the error when the split has no captions; `split` may
    always be left out (for every caption of a file without splits), `train_split` and `val_split` may not."""
    records = read_records(captions_path, "captions") if records is None else records
    if not records:
        raise VLToolsError(f"{captions_path}: no captions; give a captions JSONL ({{image_id, caption}} a line)")
    all_ids = caption_ids(records, captions_path)
    if split is None:
        split = default_split(records, default)
    pairs = [(i, r) for i, r in zip(all_ids, records, strict=True) if split is None or r.get("split") == split]
    if not pairs:
        raise VLToolsError(f"{captions_path}: no captions in split {split!r} ({_splits_found(records, chosen_by)})")
    chosen = [r for _, r in pairs]
    index: dict[str, int] = {}
    for record in chosen:
        index.setdefault(record["image_id"], len(index))
    return CaptionSplit(
        name=split or "",
        captions=[r["caption"] for r in chosen],
        caption_ids=[i for i, _ in pairs],
        image_ids=list(index),
        caption_image_index=np.array([index[r["image_id"]] for r in chosen], dtype=np.int64),
    )


def _splits_found(records: Sequence[dict], chosen_by: str) -> str:
    """What the error of an empty split says about the splits there are, and what to do with the argument
    `chosen_by`."""
    found = sorted({str(r["split"]) for r in records if "split" in r})
    if not found:
        fix = (f"leave out {argument('split')} to use every caption" if chosen_by == "split"
               else 'give each caption a "split" field (e.g. train, val, test)')
        return f"no caption has a split field; {fix}"
    unassigned = " and captions without one" if any("split" not in r for r in records) else ""
    return f"splits present: {', '.join(found)}{unassigned}; choose one with {argument(chosen_by)}"


def check_images(split: CaptionSplit, features: str | os.PathLike | FeaturesReader, captions_path: str | os.PathLike,
                 needs: Sequence[str] = ("regions",), who: str = "matching models") -> None:
    """Every image the captions name must be in the features file (a path, or one open already), which must hold
    the datasets `needs` (that `who` read); the error names the first missing id or dataset."""
    with contextlib.nullcontext(features) if isinstance(features, FeaturesReader) else FeaturesReader(features) \
            as reader:
        for name in needs:
            if name not in reader.fields:
                kind = "a global vector (--global avg)" if name == "global" else f"/{name} features"
                raise VLToolsError(f"{reader.path}: has no /{name} dataset; {who} need {kind} "
                                   "(vltools extract-regions)")
        reader.require(split.image_ids, captions_path)


def split_images(images: str | os.PathLike, captions_path: str | os.PathLike,
                 splits: Sequence[CaptionSplit]) -> dict[str, ImageItem]:
    """The images of an images input (a folder, image files, a tar, a list, an images JSONL) by id, every image the
    captions of `splits` name among them; the error names the first missing id."""
    items = {item.image_id: item for item in list_inputs([images])}
    for split in splits:
        missing = [i for i in split.image_ids if i not in items]
        if missing:
            raise VLToolsError(f"{captions_path}: image_id {missing[0]!r} is not among the images of {images} "
                               f"({len(missing)} missing); add the images or drop their captions")
    return items


def load_vocabulary(path: str | os.PathLike | None, captions: Sequence[str],
                    threshold: int = VOCAB_THRESHOLD) -> Vocabulary:
    """The vocabulary given by `path` (SCAN vocab JSON, vltools vocabulary file, a JSON list of words, or a
    vltools checkpoint), or else built from `captions` (words seen at least `threshold` times)."""
    if path is None:
        return Vocabulary.build(captions, threshold=threshold, setting="task.vocab_threshold")
    path = require_file(path, "no such vocabulary file")
    if path.suffix in (".pt", ".pth"):
        payload = load_checkpoint(path)
        if not payload.get("vocab"):
            raise VLToolsError(f"{path}: this {CHECKPOINT_FORMAT} has no vocabulary; give a vocab JSON instead")
        return Vocabulary(payload["vocab"])
    try:
        data = parse_json(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise VLToolsError(f"{path}: not a JSON vocabulary ({exc}); give a SCAN vocab JSON or a list of words") \
            from None
    if isinstance(data, list) and all(isinstance(w, str) for w in data):
        return Vocabulary(data)
    return read_vocabulary_json(path)


class FeaturesDataset(BatchedDataset):
    """A dataset reading a features HDF5 opened lazily in each process (h5py handles must not cross a fork),
    so that it works with DataLoader workers."""

    def __init__(self, features_path: str | os.PathLike) -> None:
        self.features_path = Path(features_path)
        self._reader: FeaturesReader | None = None
        self._pid: int | None = None

    @property
    def reader(self) -> FeaturesReader:
        if self._reader is None or self._pid != os.getpid():
            self._reader = FeaturesReader(self.features_path)
            self._pid = os.getpid()
        return self._reader


class MatchingDataset(FeaturesDataset):
    """Captions of one split with their images' regions; batches are read from HDF5 in one call each."""

    def __init__(self, features_path: str | os.PathLike, split: CaptionSplit, vocab: Vocabulary) -> None:
        super().__init__(features_path)
        self.split = split
        self.tokens = vocab.encode_all(split.captions)

    def __len__(self) -> int:
        return len(self.split)

    def __getitems__(self, indices: Sequence[int]) -> list[dict]:
        images = self.split.caption_image_index[list(indices)]
        ids = [self.split.image_ids[i] for i in images]
        fields = ["regions", "num_regions"] if "num_regions" in self.reader.fields else ["regions"]
        arrays = self.reader.read(ids, fields)
        regions = arrays["regions"]
        counts = arrays.get("num_regions", np.full(len(ids), regions.shape[1]))
        return [{"regions": regions[n], "num_regions": int(counts[n]), "tokens": self.tokens[i],
                 "image_index": int(images[n]), "caption_index": int(i)} for n, i in enumerate(indices)]


def collate_matching(items: Sequence[dict]) -> dict[str, torch.Tensor]:
    """Stack a list of items into a batch, in item order (never sorted by length)."""
    tokens, lengths = pad_tokens([item["tokens"] for item in items])
    return {
        "regions": torch.from_numpy(np.stack([item["regions"] for item in items]).astype(np.float32)),
        "num_regions": torch.tensor([item["num_regions"] for item in items], dtype=torch.long),
        "tokens": tokens,
        "lengths": lengths,
        "image_index": torch.tensor([item["image_index"] for item in items], dtype=torch.long),
        "caption_index": torch.tensor([item["caption_index"] for item in items], dtype=torch.long),
    }

"""Embeddings files (`encode`): one l2-normalised vector per image or caption, `/emb` with ids and the
model that wrote them, read block-wise with a non-finite check, or whole into memory (`Embeddings`, what
`vltools.encode` returns) and back.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from vltools.errors import VLToolsError
from vltools.io.fields import TEXT, field, optional
from vltools.io.hdf5 import (
    OutputFile,
    attributes,
    create_dataset,
    open_h5,
    read,
    read_strings,
    refuse_nonfinite,
    set_attrs,
    write_strings,
)
from vltools.io.held import Embeddings
from vltools.io.output import written
from vltools.io.part_sets import PartsDataset, PartsHandle, check_spans, unique_ids
from vltools.io.provenance import ids_digest
from vltools.io.shards import part_files

REENCODE = "rerun vltools encode"
# what the writer records anew of its own file: its format, time, count of failures and the digests of the string
# datasets written after the attributes (`ids_digest` is the encoder's own attribute, of every id)
WRITER_ATTRS = {"format", "format_version", "created", "num_failed", "caption_image_ids_digest", "failed_digest"}
MERGE_ROWS = 65536


@dataclass
class EmbeddingsFile:
    """An open embeddings file: ids, the `/emb` dataset (read lazily), its side, and its model's digest."""

    path: Path
    ids: list[str]
    emb: h5py.Dataset
    side: str
    checkpoint_digest: str | None
    caption_image_ids: list[str] | None
    handle: h5py.File | PartsHandle
    failed: list[str] | None      # the images skipped ("id<TAB>reason"), where the writer recorded them

    def close(self) -> None:
        self.handle.close()


def open_embeddings(path: str | os.PathLike) -> EmbeddingsFile:
    """Open and check an embeddings file written by `vltools encode`, or the parts of a set in a folder as one
    (vltools.io.shards; `open_parts`)."""
    if Path(path).is_dir():
        return open_parts(Path(path))
    handle = open_h5(path, "embeddings")
    try:
        return _checked(path, handle)
    except BaseException:
        handle.close()
        raise


def _checked(path: str | os.PathLike, handle: h5py.File) -> EmbeddingsFile:
    """The embeddings of the open file `handle`, every part checked (the caller closes it on an error)."""
    for name in ("ids", "emb"):
        if name not in handle:
            raise VLToolsError(f"{path}: embeddings file lacks the /{name} dataset; {REENCODE}")
    ids = read_strings(handle, "ids")
    emb = handle["emb"]
    if emb.ndim != 2 or emb.shape[0] != len(ids):
        raise VLToolsError(f"{path}: /emb has shape {emb.shape} for {len(ids)} ids; {REENCODE}")
    for start in range(0, emb.shape[0], 65536):    # one pass in blocks: a NaN row would rank silently wrong
        block = read(emb, np.s_[start:start + 65536])
        refuse_nonfinite(path, "emb", block, ids, range(start, start + len(block)))
    attrs = attributes(handle)
    side = field(attrs, "side", TEXT, path, REENCODE, what="attribute", default="")
    digest = field(attrs, "checkpoint_digest", optional(TEXT), path, REENCODE, what="attribute", default=None)
    image_ids = read_strings(handle, "caption_image_ids") if "caption_image_ids" in handle else None
    failed = read_strings(handle, "failed") if "failed" in handle else None
    return EmbeddingsFile(Path(path), ids, emb, side, digest, image_ids, handle, failed)


def open_parts(folder: Path) -> EmbeddingsFile:
    """The parts of the set in `folder` as one embeddings file: each checked as a file is, of one run (one model,
    side and dimension; inputs each covers once, in order), no id in two; its `ids_digest` is of every id."""
    parts: list[EmbeddingsFile] = []
    try:
        for file in part_files(folder):
            parts.append(open_embeddings(file))
        check_spans(folder, [(part.path, attributes(part.handle)) for part in parts])
        full = [part for part in parts if part.ids] or parts[:1]     # a part of no row has no dimension
        for part in full[1:]:
            check_same_model(full[0], part)
            if part.side != full[0].side:
                raise VLToolsError(f"{part.path}: embeds {part.side} but {full[0].path} {full[0].side}; keep one "
                                   "run's parts in a folder")
        ids = unique_ids([(part.path, part.ids) for part in parts], "id")
    except BaseException:
        for part in parts:
            part.close()
        raise
    first = parts[0]
    handle = PartsHandle(folder, {**attributes(first.handle), "ids_digest": ids_digest(ids)},
                         {"emb": PartsDataset([part.emb for part in full])}, [part.close for part in parts],
                         own=("caption_image_ids_digest", "failed_digest", "num_failed"))
    image_ids = None if first.caption_image_ids is None else \
        [item for part in parts for item in part.caption_image_ids or ()]
    failed = None if first.failed is None else [line for part in parts for line in part.failed or ()]
    return EmbeddingsFile(folder, ids, handle["emb"], first.side, first.checkpoint_digest, image_ids, handle, failed)


def read_embeddings(path: str | os.PathLike) -> Embeddings:
    """The whole embeddings file at `path` in memory, checked as `open_embeddings` checks it."""
    opened = open_embeddings(path)
    try:
        return Embeddings(opened.ids, read(opened.emb), opened.side, opened.caption_image_ids,
                          attributes(opened.handle))
    finally:
        opened.close()


def write_embeddings(path: str | os.PathLike | None, ids: Sequence[str], blocks: Iterable[np.ndarray],
                     attrs: dict[str, object], caption_image_ids: Sequence[str] | None = None,
                     failed: Sequence[str] | None = None) -> None:
    """Stream [B, E] blocks (rows in the order of `ids`) into an embeddings file, atomically or to stdout; `failed`:
    the images skipped ("id<TAB>reason" lines, the `/failed` dataset and `num_failed`, as features files keep
    them)."""
    with written(path) as target, OutputFile(target) as handle:
        set_attrs(handle, "embeddings", {**attrs, **({} if failed is None else {"num_failed": len(failed)})})
        write_strings(handle, "ids", ids)
        if caption_image_ids is not None:
            write_strings(handle, "caption_image_ids", caption_image_ids)
        if failed is not None:
            write_strings(handle, "failed", failed)
        row = 0
        for block in blocks:
            if "emb" not in handle:
                create_dataset(handle, "emb", shape=(len(ids), block.shape[1]), dtype=np.float32,
                               chunks=(min(len(ids), 1024), block.shape[1]))
            handle.check_room(block.nbytes)
            handle["emb"][row:row + len(block)] = block
            handle.check()
            row += len(block)
        if row != len(ids):
            raise ValueError(f"{row} embeddings written for {len(ids)} ids")
        if "emb" not in handle:     # no id (a part of a set that got none): no rows, and no dimension to give them
            create_dataset(handle, "emb", shape=(0, 0), dtype=np.float32)


def merge_parts(folder: Path, target: str | os.PathLike) -> int:
    """The embeddings of the set of parts in `folder` joined into one file at `target`, as one process writes it
    (its creation time is the merge's); returns how many rows."""
    opened = open_embeddings(folder)
    try:
        attrs = {key: value for key, value in attributes(opened.handle).items() if key not in WRITER_ATTRS}
        blocks = (read(opened.emb, np.s_[start:start + MERGE_ROWS]) for start in range(0, len(opened.ids), MERGE_ROWS))
        write_embeddings(target, opened.ids, blocks, attrs, opened.caption_image_ids, opened.failed)
        return len(opened.ids)
    finally:
        opened.close()


def write_embeddings_of(path: str | os.PathLike, embeddings: Embeddings) -> None:
    """Write `embeddings` as the file `read_embeddings` reads them from (its attributes kept, its side over them)."""
    write_embeddings(path, embeddings.ids, [np.asarray(embeddings.vectors)],
                     {**embeddings.attrs, "side": embeddings.side}, embeddings.caption_image_ids)


def check_same_model(first: EmbeddingsFile, second: EmbeddingsFile) -> None:
    """Two embeddings files to compare must come from one checkpoint and have one dimension."""
    if first.checkpoint_digest != second.checkpoint_digest:
        raise VLToolsError(f"{second.path}: encoded by another checkpoint than {first.path} "
                           f"({second.checkpoint_digest} vs {first.checkpoint_digest}); encode both sides with "
                           "the same model")
    if first.emb.shape[1] != second.emb.shape[1]:
        raise VLToolsError(f"{second.path}: {second.emb.shape[1]}-d embeddings vs {first.emb.shape[1]}-d in "
                           f"{first.path}")

"""Merging features files: `vltools merge` joins the outputs of `--shard i/n` runs into one.

The files must have been made with the same options; the merge streams their rows (never more than a block in
memory) and keeps at most `OPEN_READERS` files open, so thousands of shards stay under the open-files limit.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from vltools.errors import VLToolsError
from vltools.io.features import IDS_CHECKSUM, FeaturesReader, FeaturesWriter
from vltools.io.hdf5 import REWRITE

# provenance: where a file's rows came from and how it was made (kept per part by a merge, never compared)
PROVENANCE_ATTRS = {"vltools_version", "command", "created", "shard", "inputs_digest", "source", "split",
                    "merged_from", "parts"}
# attributes that describe the file rather than what its features are (dtype is compared on the datasets)
BOOKKEEPING_ATTRS = PROVENANCE_ATTRS | {"format", "format_version", "num_failed", "dtype", IDS_CHECKSUM}
WRITER_ATTRS = {"format", "format_version", "vltools_version", "command", "created", "dtype", "num_failed",
                IDS_CHECKSUM}
MERGE_BLOCK = 256
OPEN_READERS = 64     # files a merge holds open at once (the least recently read is closed)


def is_provenance(key: str) -> bool:
    """Whether attribute `key` records where rows came from (source, command, time, digests...)."""
    return key in PROVENANCE_ATTRS or key.endswith("_digest")


def comparable_attrs(attrs: dict[str, object]) -> dict[str, str]:
    """The attributes two files must share to be merged: what the features are (backbone, weights, regions,
    sizes...), not where they came from."""
    return {k: str(v) for k, v in attrs.items() if k not in BOOKKEEPING_ATTRS and not is_provenance(k)}


def parts_provenance(path: Path, attrs: dict[str, object]) -> list[dict[str, str]]:
    """The provenance of one file to merge: its own (with its file name), or its parts' if it is a merge."""
    if "parts" in attrs:
        try:
            parts = json.loads(attrs["parts"])
        except (ValueError, RecursionError):
            parts = None
        if not isinstance(parts, list) or not all(isinstance(part, dict) for part in parts):
            raise VLToolsError(f"{path}: attribute 'parts' is not the JSON list of the merged files' provenance; "
                               f"{REWRITE}")
        return parts
    return [{"file": path.name, **{k: str(v) for k, v in attrs.items() if is_provenance(k)}}]


def merge_files(paths: Sequence[Path], target: Path) -> int:
    """`vltools merge`: the rows of `paths` in order into `target`, which keeps the options the files share
    and, in its `parts` attribute (JSON), each part's provenance; /failed lists are concatenated."""
    with FeaturesReader(paths[0]) as first:
        attrs = {k: v for k, v in first.attrs.items() if not is_provenance(k)}
    failed: list[str] = []
    parts: list[dict[str, str]] = []
    for path in paths:
        with FeaturesReader(path) as reader:
            failed += reader.failed
            parts += parts_provenance(path, reader.attrs)
    attrs["parts"] = json.dumps(parts)
    return merge_features(paths, target, attrs, failed=failed)


def check_compatible(reference: FeaturesReader, other: FeaturesReader) -> None:
    """Raise a one-line error naming `other` when its options, fields, shapes or dtypes differ."""
    mine, theirs = comparable_attrs(reference.attrs), comparable_attrs(other.attrs)
    for key in sorted(set(mine) | set(theirs)):
        if mine.get(key) != theirs.get(key):
            raise VLToolsError(f"{other.path}: attribute {key!r} is {theirs.get(key)!r} but {reference.path} has "
                               f"{mine.get(key)!r}; only files made with the same options can be merged")
    if reference.fields != other.fields:
        raise VLToolsError(f"{other.path}: has datasets {other.fields} but {reference.path} has {reference.fields}; "
                           "only files made with the same options can be merged")
    for field in reference.fields:
        a, b = reference.handle[field], other.handle[field]
        if a.shape[1:] != b.shape[1:] or a.dtype != b.dtype:
            raise VLToolsError(f"{other.path}: /{field} rows are {b.shape[1:]} {b.dtype} but {reference.path} has "
                               f"{a.shape[1:]} {a.dtype}; only files made with the same options can be merged")


def merge_features(sources: Sequence[Path], target: Path, attrs: dict[str, object],
                   order: Sequence[str] | None = None, failed: Sequence[str] = ()) -> int:
    """Stream the rows of features files `sources` into a new file `target`; return the row count.

    Rows follow `order` (ids, each in some source) when given, else the sources' concatenation. The files
    must agree (check_compatible) and must not share ids. Never holds more than a block of rows in memory, nor
    more than `OPEN_READERS` files open. `attrs` are the new file's attributes; its provenance (command, time,
    version) is this process's.
    """
    owner, dtype = _owners(sources)
    kept = {k: v for k, v in attrs.items() if k not in WRITER_ATTRS}
    with FeaturesWriter(target, kept, dtype=dtype) as writer:
        if order is None:
            for path in sources:
                with FeaturesReader(path) as reader:
                    for ids, arrays in reader.iter_batches(MERGE_BLOCK):
                        writer.add(ids, **arrays)
        else:
            for ids, arrays in _in_order(sources, owner, order):
                writer.add(ids, **arrays)
        writer.set_failed(failed)
        return len(writer.ids)


def _owners(sources: Sequence[Path]) -> tuple[dict[str, int], str]:
    """Which of `sources` holds each id, after checking that they agree and share no id; and their dtype."""
    owner: dict[str, int] = {}
    with FeaturesReader(sources[0]) as first:
        for number, path in enumerate(sources):
            with FeaturesReader(path) as reader:
                check_compatible(first, reader)
                for image_id in reader.ids:
                    if image_id in owner:
                        raise VLToolsError(f"{reader.path}: image id {image_id!r} is also in "
                                           f"{sources[owner[image_id]]}; merge each once")
                    owner[image_id] = number
        return owner, first.attrs.get("dtype", "float16")


def _in_order(sources: Sequence[Path], owner: dict[str, int],
              order: Sequence[str]) -> Iterator[tuple[list[str], dict[str, np.ndarray]]]:
    """(ids, arrays) blocks of `MERGE_BLOCK` rows of `order`, each row fetched from the source `owner` names; at most
    `OPEN_READERS` sources are open at once (the least recently read is closed, and opened again if needed)."""
    readers: OrderedDict[int, FeaturesReader] = OrderedDict()

    def reader(number: int) -> FeaturesReader:
        if number in readers:
            readers.move_to_end(number)
        else:
            if len(readers) >= OPEN_READERS:
                readers.popitem(last=False)[1].close()
            readers[number] = FeaturesReader(sources[number])
        return readers[number]

    try:
        for start in range(0, len(order), MERGE_BLOCK):
            ids = list(order[start:start + MERGE_BLOCK])
            by_source: dict[int, list[str]] = {}
            for image_id in ids:
                by_source.setdefault(owner[image_id], []).append(image_id)
            fetched = {number: reader(number).read(chunk) for number, chunk in by_source.items()}
            position = {image_id: (number, row) for number, chunk in by_source.items()
                        for row, image_id in enumerate(chunk)}
            fields = next(iter(fetched.values())).keys()
            yield ids, {field: np.stack([fetched[position[i][0]][field][position[i][1]] for i in ids])
                        for field in fields}
    finally:
        for open_reader in readers.values():
            open_reader.close()

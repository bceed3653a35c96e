"""Merging features files: `vltools merge` joins the outputs of `--shard i/n` runs into one.

The files must have been made with the same options; the merge streams their rows (never more than a block in
memory) from one file at a time, beside the first, so thousands of shards stay under the open-files limit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from vltools.errors import VLToolsError
from vltools.io.features import IDS_CHECKSUM, FeaturesReader, write_features
from vltools.io.hdf5 import REWRITE

# provenance: where a file's rows came from and how it was made (kept per part by a merge, never compared)
PROVENANCE_ATTRS = {"vltools_version", "command", "created", "shard", "inputs_digest", "source", "split",
                    "merged_from", "parts"}
# attributes that describe the file rather than what its features are (dtype is compared on the datasets)
BOOKKEEPING_ATTRS = PROVENANCE_ATTRS | {"format", "format_version", "num_failed", "dtype", IDS_CHECKSUM}
WRITER_ATTRS = {"format", "format_version", "vltools_version", "command", "created", "dtype", "num_failed",
                IDS_CHECKSUM}
MERGE_BLOCK = 256


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
                   failed: Sequence[str] = ()) -> int:
    """Stream the rows of features files `sources`, in their order, into a new file `target`; return the row count.
    The files must agree (check_compatible) and must not share ids. `attrs` are the new file's attributes; its
    provenance (command, time, version) is this process's."""
    dtype = _checked_dtype(sources)

    def blocks() -> Iterator[tuple[list[str], dict[str, np.ndarray]]]:
        for path in sources:
            with FeaturesReader(path) as reader:
                yield from reader.iter_batches(MERGE_BLOCK)

    return write_features(target, {k: v for k, v in attrs.items() if k not in WRITER_ATTRS}, dtype, blocks(),
                          failed)


def _checked_dtype(sources: Sequence[Path]) -> str:
    """The dtype of `sources`, after checking that they agree and share no id."""
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
        return first.attrs.get("dtype", "float16")

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
from vltools.io.embeddings import merge_parts
from vltools.io.features import (
    IDS_CHECKSUM,
    FeaturesReader,
    check_compatible,
    is_provenance,
    write_features,
)
from vltools.io.hdf5 import REWRITE, hdf5_kind
from vltools.io.shards import is_part_set, part_files
from vltools.io.sims import merge_parts as merge_sims

WRITER_ATTRS = {"format", "format_version", "vltools_version", "command", "created", "dtype", "num_failed",
                IDS_CHECKSUM}
SET_WRITER_ATTRS = WRITER_ATTRS - {"vltools_version", "command"}   # what the writer of a set's one file records anew
MERGE_BLOCK = 256     # rows per write: the block a per-item stage writes its output in (Checkpoint.gather's)


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


def merge_inputs(paths: Sequence[Path], target: Path) -> tuple[int, str]:
    """`vltools merge`: (rows written, what they are). One folder of parts (vltools.io.shards) becomes the file one
    process would have written: features, embeddings, sims or JSON lines (captions, descriptions), by its parts' kind;
    features files (shards, splits) are joined by `merge_files`."""
    if len(paths) == 1 and is_part_set(paths[0]):
        first = part_files(paths[0])[0]
        if first.suffix == ".jsonl":
            return merge_lines(paths[0], target), "lines"
        kind = hdf5_kind(first)
        if kind == "embeddings":
            return merge_parts(paths[0], target), "embeddings"
        if kind == "sims":
            return merge_sims(paths[0], target), "captions' similarities"
        return merge_set(paths[0], target), "images"
    for path in paths:
        if Path(path).is_dir() or hdf5_kind(path) is None:
            raise VLToolsError(f"{path}: merge joins features files, or one folder of parts (--shard I/N or torchrun "
                               "with -o FOLDER); give those")
    return merge_files(paths, target), "images"


def merge_lines(folder: Path, target: Path) -> int:
    """The JSON lines of the parts in `folder`, in order, into `target` (each part's lines as it wrote them)."""
    count = 0
    with open(target, "wb") as out:
        for part in part_files(folder):
            with open(part, "rb") as lines:
                for line in lines:
                    out.write(line if line.endswith(b"\n") else line + b"\n")
                    count += 1
    return count


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


def merge_set(folder: Path, target: Path) -> int:
    """The parts of the set in `folder` joined into `target` as one process would have written it: the same
    rows, attributes and command line (its creation time is the merge's), written in the same blocks."""
    with FeaturesReader(folder) as reader:
        attrs = {k: v for k, v in reader.attrs.items() if k not in SET_WRITER_ATTRS}
        return write_features(target, attrs, str(reader.attrs.get("dtype", "float16")),
                              reader.iter_batches(MERGE_BLOCK), reader.failed)


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
    """The dtype of `sources`, after checking that they agree and share no id (a file of no image, a shard that got
    none, is compared by its options alone)."""
    owner: dict[str, int] = {}
    sizes = []
    for path in sources:
        with FeaturesReader(path) as reader:
            sizes.append(len(reader))
    reference = next((path for path, size in zip(sources, sizes, strict=True) if size), sources[0])
    with FeaturesReader(reference) as first:
        for number, path in enumerate(sources):
            with FeaturesReader(path) as reader:
                check_compatible(first, reader)
                for image_id in reader.ids:
                    if image_id in owner:
                        raise VLToolsError(f"{reader.path}: image id {image_id!r} is also in "
                                           f"{sources[owner[image_id]]}; merge each once")
                    owner[image_id] = number
        return first.attrs.get("dtype", "float16")

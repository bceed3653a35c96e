"""Similarity matrices on disk: the sims HDF5 (`/sims` images x captions with ids) and the
SCAN `.npy` matrix, read and checked, and the ensemble mean of several.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vltools.errors import input_error, shown_ids
from vltools.io.hdf5 import attributes, first_nonfinite, open_h5, read_strings, write_arrays
from vltools.io.part_sets import PLACE_ATTRS, check_spans, unique_ids
from vltools.io.provenance import ids_digest
from vltools.io.shards import is_part_set, part_files

PRECOMP_CAPTIONS_PER_IMAGE = 5
# what the writer records anew: its format, time, and the digest of the caption images it writes after the
# attributes (match records the digests of the image and caption ids among its own attributes)
WRITER_ATTRS = {"format", "format_version", "created", "caption_image_ids_digest"}


@dataclass
class Sims:
    """A similarity matrix (rows: images or queries; columns: captions or database items) and its ids."""

    sims: np.ndarray
    image_ids: list[str]
    caption_ids: list[str]
    caption_image_ids: list[str] | None


def write_sims(path: str | os.PathLike | None, sims: np.ndarray, image_ids: list[str], caption_ids: list[str],
               caption_image_ids: list[str] | None = None, attrs: dict[str, object] | None = None) -> None:
    """Write a sims HDF5 file (`/sims` n_images x n_captions and its ids) atomically, or to stdout for None/`-`."""
    sims = np.asarray(sims)
    if sims.shape != (len(image_ids), len(caption_ids)):
        raise ValueError(f"sims shape {sims.shape} != ({len(image_ids)} image ids, {len(caption_ids)} caption ids)")
    arrays: dict[str, object] = {"sims": sims, "image_ids": list(image_ids), "caption_ids": list(caption_ids)}
    if caption_image_ids is not None:
        if len(caption_image_ids) != len(caption_ids):
            raise ValueError("caption_image_ids must have one entry per caption")
        arrays["caption_image_ids"] = list(caption_image_ids)
    write_arrays(path, "sims", arrays, attrs)


def refuse_nonfinite_sims(sims: np.ndarray, image_ids: Sequence[str], source: object, where: str | None = None) -> None:
    """Refuse a similarity matrix holding NaN or an infinity, naming its source (a file, or the object scored
    from memory) and the first bad row: the one check of every matrix a scorer ranks, read or given."""
    if (bad := first_nonfinite(sims)) is not None:
        raise input_error(source, where, f"contains NaN or infinite scores (row {bad}, image {image_ids[bad]!r})",
                          "check the model that wrote it")


def _unique(ids: list[str], path: object, name: str) -> None:
    seen: set[str] = set()
    for item in ids:
        if item in seen:
            raise input_error(path, f"/{name}", f"duplicate id {item!r}", "ids must be unique")
        seen.add(item)


def read_sims(path: str | os.PathLike) -> Sims:
    """Read and check a sims HDF5 file: a 2-D finite matrix whose shape matches its unique id lists; a folder of
    parts (vltools.io.shards: each the columns of a run of the captions) is read as the one matrix they make."""
    if is_part_set(path):
        return read_parts(Path(path))[0]
    with open_h5(path, "sims") as handle:
        for name in ("sims", "image_ids", "caption_ids"):
            if name not in handle:
                raise input_error(path, None, f"sims file lacks the /{name} dataset", "rewrite it with match --sims")
        sims = handle["sims"][()]
        image_ids = read_strings(handle, "image_ids")
        caption_ids = read_strings(handle, "caption_ids")
        caption_image_ids = read_strings(handle, "caption_image_ids") if "caption_image_ids" in handle else None
    if sims.ndim != 2 or sims.shape != (len(image_ids), len(caption_ids)):
        raise input_error(path, "/sims", f"shape {sims.shape} does not match {len(image_ids)} image ids x "
                          f"{len(caption_ids)} caption ids")
    refuse_nonfinite_sims(sims, image_ids, path, "/sims")
    _unique(image_ids, path, "image_ids")
    _unique(caption_ids, path, "caption_ids")
    if caption_image_ids is not None and len(caption_image_ids) != len(caption_ids):
        raise input_error(path, "/caption_image_ids", f"{len(caption_image_ids)} entries for {len(caption_ids)} "
                          "captions")
    return Sims(sims, image_ids, caption_ids, caption_image_ids)


def read_parts(folder: Path) -> tuple[Sims, dict[str, object]]:
    """The matrix of the sims parts in `folder`, each checked as a file is, of one run (the same images; captions
    each part covers once, in order; no caption twice), and its attributes (the first part's, but its place)."""
    parts, places = [], []
    for file in part_files(folder):
        parts.append(read_sims(file))
        with open_h5(file, "sims") as handle:
            places.append((file, attributes(handle)))
    check_spans(folder, places)
    for (file, _), part in zip(places[1:], parts[1:], strict=True):
        if part.image_ids != parts[0].image_ids:
            raise input_error(file, "/image_ids", f"has other images than {places[0][0]}",
                              "keep one run's parts in a folder")
    caption_ids = unique_ids([(file, part.caption_ids) for (file, _), part in zip(places, parts, strict=True)],
                             "caption id")
    image_ids = None if parts[0].caption_image_ids is None else \
        [item for part in parts for item in part.caption_image_ids or ()]
    attrs = {key: value for key, value in places[0][1].items() if key not in PLACE_ATTRS}
    attrs["caption_ids_digest"] = ids_digest(caption_ids)       # each part's is of its own captions
    return Sims(np.concatenate([part.sims for part in parts], axis=1), parts[0].image_ids, caption_ids,
                image_ids), attrs


def merge_parts(folder: Path, target: str | os.PathLike) -> int:
    """The sims parts in `folder` joined into one file at `target`, as one process writes it (its creation time is
    the merge's); returns how many captions."""
    joined, attrs = read_parts(folder)
    write_sims(target, joined.sims, joined.image_ids, joined.caption_ids, joined.caption_image_ids,
               {key: value for key, value in attrs.items() if key not in WRITER_ATTRS})
    return len(joined.caption_ids)


def read_npy_sims(path: str | os.PathLike, image_ids: list[str] | None = None, caption_ids: list[str] | None = None,
                  caption_image_ids: list[str] | None = None, prefix: str = "") -> Sims:
    """A plain `.npy` images x captions matrix as `Sims`.

    With ids (from a captions file: rows = images in order of first mention, columns = captions in order) the
    shape must fit them; without, the matrix must be in the precomp layout, 5 captions per image in order
    (n x 5n), and the ids are those `convert precomp` gives a split without an ids file: image `{prefix}{i}`,
    caption `{prefix}{i}#{k}`.
    """
    try:
        sims = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise input_error(path, None, f"not a readable .npy array ({exc})",
                          "give an images x captions similarity matrix saved with numpy.save") from None
    if sims.ndim != 2 or not np.issubdtype(sims.dtype, np.number):
        raise input_error(path, None, f"expected a 2-D numeric images x captions matrix, found {sims.dtype} "
                          f"{tuple(sims.shape)}", "give the similarity matrix itself")
    rows, columns = sims.shape
    if image_ids is None:
        per_image = PRECOMP_CAPTIONS_PER_IMAGE
        if rows == 0 or columns != per_image * rows:
            hint = " (it looks transposed: rows must be images)" if rows == per_image * columns else ""
            raise input_error(path, None, f"shape {rows} x {columns} is not the precomp layout of {per_image} "
                              f"captions per image (n x {per_image}n){hint}",
                              "give --captions CAPS.jsonl naming the columns' captions in order")
        image_ids = [f"{prefix}{i}" for i in range(rows)]
        caption_image_ids = [image_ids[j // per_image] for j in range(columns)]
        caption_ids = [f"{image}#{j % per_image}" for j, image in enumerate(caption_image_ids)]
    elif (rows, columns) != (len(image_ids), len(caption_ids or ())):
        raise input_error(path, None, f"shape {rows} x {columns} does not fit the {len(image_ids)} images x "
                          f"{len(caption_ids or ())} captions of the captions file",
                          "give the captions (and --split) the matrix was computed for")
    matrix = np.asarray(sims, dtype=np.float64 if sims.dtype == np.float64 else np.float32)
    refuse_nonfinite_sims(matrix, image_ids, path)
    return Sims(matrix, list(image_ids), list(caption_ids or ()), list(caption_image_ids or ()) or None)


def average_sims(parts: Sequence[tuple[object, Sims]]) -> Sims:
    """The ensemble of several (source, matrix) parts: the mean matrix, in float64. Every part must have the
    first part's image ids, caption ids and caption images in the same order."""
    first_source, first = parts[0]
    total = np.array(first.sims, dtype=np.float64)
    for source, part in parts[1:]:
        for name in ("image_ids", "caption_ids", "caption_image_ids"):
            mine, theirs = getattr(first, name), getattr(part, name)
            if mine != theirs:
                what = ("the same ids in another order" if mine is not None and theirs is not None
                        and sorted(mine) == sorted(theirs) else "other ids")
                raise input_error(source, f"/{name}", f"has {what} than {first_source}",
                                  "an ensemble averages matrices of the same images and captions, in the same order")
        total += part.sims
    return Sims(total / len(parts), first.image_ids, first.caption_ids, first.caption_image_ids)


def caption_image_index(image_ids: list[str], caption_image_ids: list[str], source: object,
                        every_image_captioned: bool = True) -> np.ndarray:
    """Row of each caption's image; every caption's image must be listed and, unless told otherwise, every
    image must have a caption (retrieval needs one; self-retrieval keeps uncaptioned images as distractors)."""
    row = {image_id: i for i, image_id in enumerate(image_ids)}
    unknown = [c for c in dict.fromkeys(caption_image_ids) if c not in row]
    if unknown:
        raise input_error(source, "/caption_image_ids", f"{len(unknown)} captions' images are not in /image_ids: "
                          f"{shown_ids(unknown)}", "score the matching image and caption sets")
    index = np.array([row[c] for c in caption_image_ids], dtype=np.int64)
    lonely = [image_ids[i] for i in np.flatnonzero(np.bincount(index, minlength=len(image_ids)) == 0)]
    if lonely and every_image_captioned:
        raise input_error(source, "/image_ids", f"{len(lonely)} images have no caption: {shown_ids(lonely)}",
                          "every image needs at least one caption to be scored")
    return index

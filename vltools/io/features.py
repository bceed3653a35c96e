"""The features HDF5 file (DESIGN section 3): a chunked writer of rows by image and a streaming reader."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from vltools.errors import VLToolsError
from vltools.io.fields import INTEGER, TEXT, field
from vltools.io.hdf5 import (
    REWRITE,
    attributes,
    decode_strings,
    open_h5,
    read,
    read_strings,
    refuse_nonfinite,
    string_dtype,
)
from vltools.io.held import FIELDS, FeaturesInMemory
from vltools.io.part_sets import PartsDataset, PartsHandle, check_spans, unique_ids
from vltools.io.rows import IDS_CHECKSUM, RowsWriter, stored_rows
from vltools.io.shards import part_files

FLOAT_FIELDS = ("regions", "global", "featmap")
FIELD_DTYPES = {"boxes": np.float32, "num_regions": np.int32, "image_size": np.int32, "mask": np.float32,
                "labels": np.int32, "label_scores": np.float32, "attributes": np.int32, "attribute_scores": np.float32}
BOTTOM_UP = "bottom-up"  # the extractor of the bottom-up-attention features (Anderson et al. 2018)
# the kind of each attribute the readers rely on, checked when the file is opened (the rest are only shown)
ATTRIBUTE_KINDS = {IDS_CHECKSUM: TEXT, "dtype": TEXT, "stride": INTEGER, "parts": TEXT, "extractor": TEXT,
                   "backbone": TEXT, "weights": TEXT, "regions": TEXT, "global": TEXT}
# the axes of each dataset (a number: a fixed width), checked with the kind of its numbers when a file is opened, so
# that a dataset of another rank is one line naming it, never "not enough values to unpack" deep in a stage
AXES = {"regions": ("images", "regions", "dims"), "boxes": ("images", "regions", 4), "num_regions": ("images",),
        "image_size": ("images", 2), "global": ("images", "dims"), "featmap": ("images", "channels", "height", "width"),
        "mask": ("images", "height", "width"), "labels": ("images", "regions"), "label_scores": ("images", "regions"),
        "attributes": ("images", "regions"), "attribute_scores": ("images", "regions")}

# provenance: where a file's rows came from and how it was made (kept per part by a merge, never compared)
PROVENANCE_ATTRS = {"vltools_version", "command", "created", "shard", "inputs_digest", "source", "split",
                    "merged_from", "parts", "part", "span"}
# attributes that describe the file rather than what its features are (dtype is compared on the datasets)
BOOKKEEPING_ATTRS = PROVENANCE_ATTRS | {"format", "format_version", "num_failed", "dtype", IDS_CHECKSUM}


def is_provenance(key: str) -> bool:
    """Whether attribute `key` records where rows came from (source, command, time, digests...)."""
    return key in PROVENANCE_ATTRS or key.endswith("_digest")


def comparable_attrs(attrs: dict[str, object]) -> dict[str, str]:
    """The attributes two files must share to be merged: what the features are (backbone, weights, regions,
    sizes...), not where they came from."""
    return {k: str(v) for k, v in attrs.items() if k not in BOOKKEEPING_ATTRS and not is_provenance(k)}


def field_dtypes(dtype: str) -> dict[str, object]:
    """The stored dtype of each features dataset: `dtype` for the float features, fixed for the rest."""
    return dict.fromkeys(FLOAT_FIELDS, dtype) | FIELD_DTYPES


class FeaturesWriter(RowsWriter):
    """Append rows (one per image) to a features file; datasets are created on the first append, each chunked by
    image so that readers can fetch any rows without loading the file. `name` is what errors about rows call the
    file (default `path`). A failed write (full disk, file size limit) is an OSError naming `path`, raised by the
    `add` or `close` it happened in; the file is then closed, for the caller to remove."""

    def __init__(self, path: str | os.PathLike, attrs: dict[str, object], dtype: str = "float16",
                 name: str | os.PathLike | None = None) -> None:
        super().__init__(path, "features", attrs, dtype, name, id_kind="image id", dtypes=field_dtypes(dtype))

    def add(self, ids: Sequence[str], **arrays: np.ndarray) -> None:
        """Append rows for `ids`; `arrays` are among `FIELDS` (regions, boxes, num_regions, image_size, global,
        featmap, mask, and a detector's labels, label_scores, attributes, attribute_scores), each with len(ids)
        rows."""
        unknown = set(arrays) - set(FIELDS)
        if unknown:
            raise ValueError(f"unknown features fields {sorted(unknown)}")
        super().add(ids, **arrays)

    def set_failed(self, lines: Sequence[str]) -> None:
        """Record the images a stage skipped: the `/failed` dataset of "id<TAB>reason" and `num_failed`."""
        self.handle.create_dataset("failed", data=np.array(list(lines), dtype=object), dtype=string_dtype())
        self.handle.attrs["num_failed"] = len(lines)


def write_features(path: str | os.PathLike, attrs: dict[str, object], dtype: str,
                   blocks: Iterable[tuple[list[str], Mapping[str, np.ndarray]]], failed: Sequence[str] = ()) -> int:
    """Write a features file at `path` from (ids, arrays) blocks, with the skipped images' `failed` lines; return
    how many rows."""
    with FeaturesWriter(path, attrs, dtype) as writer:
        for ids, arrays in blocks:
            writer.add(ids, **arrays)
        writer.set_failed(failed)
        return len(writer.ids)


def stored_features(path: object, ids: Sequence[str], arrays: Mapping[str, object],
                    dtype: np.dtype) -> dict[str, np.ndarray]:
    """`arrays` (among `FIELDS`, one row per id of `ids`) as a features file stores them: the float fields as
    `dtype` (float16 or float32), the others as `FIELD_DTYPES` says (no copy where they are already); a row that
    would be stored non-finite is refused, naming `path` (what errors call the file) and its id."""
    return stored_rows(path, ids, arrays, np.dtype(dtype), field_dtypes(str(np.dtype(dtype))), "image id")


class FeaturesReader:
    """Read rows of a features file by id, in the order asked, without loading the whole file; of the parts of a
    set in a folder (vltools.io.shards), as one file holding their rows in order; or of features held in memory
    (`FeaturesInMemory`: the Python API's), with the same checks, named as their argument."""

    def __init__(self, path: str | os.PathLike | FeaturesInMemory) -> None:
        if isinstance(path, FeaturesInMemory):
            self.path: Path | FeaturesInMemory = path
            self.handle = path
        elif Path(path).is_dir():
            self._open_parts(Path(path))
            return
        else:
            self.path = Path(path)
            self.handle = open_h5(self.path, "features")
        try:
            self._check()
        except BaseException:
            self.handle.close()
            raise

    def _open_parts(self, folder: Path) -> None:
        """Open every part of the set in `folder`, each checked as a file is; they must be of one run (the same
        options, and inputs each covers once, in order: their `span`s), and hold no id twice."""
        self.path = folder
        parts: list[FeaturesReader] = []
        try:
            for file in part_files(folder):
                parts.append(FeaturesReader(file))
            check_spans(folder, [(part.path, part.attrs) for part in parts])
            full = [part for part in parts if len(part)] or parts[:1]   # a part of no image may lack datasets
            for part in full[1:]:
                check_compatible(full[0], part)
            self.ids = unique_ids([(part.path, part.ids) for part in parts], "image id")
        except BaseException:
            for part in parts:
                part.close()
            raise
        datasets = {name: PartsDataset([part.handle[name] for part in full]) for name in full[0].fields}
        self.handle = PartsHandle(folder, parts[0].attrs, datasets, [part.close for part in parts],
                                  own=(IDS_CHECKSUM, "num_failed"))
        self.parts = parts
        self.attrs = dict(self.handle.attrs)
        self.index = {image_id: row for row, image_id in enumerate(self.ids)}

    def _check(self) -> None:
        """Read and check the ids and the attributes, and that every dataset has one row per id."""
        if "ids" not in self.handle:
            raise VLToolsError(f"{self.path}: features file has no /ids dataset; {REWRITE}")
        self.attrs = attributes(self.handle)
        for key, kind in ATTRIBUTE_KINDS.items():
            if key in self.attrs:
                self.attrs[key] = field(self.attrs, key, kind, self.path, REWRITE, what="attribute")
        self.ids = read_strings(self.handle, "ids", IDS_CHECKSUM)
        self.index = {image_id: row for row, image_id in enumerate(self.ids)}
        if len(self.index) != len(self.ids):
            dup = next(i for i in self.ids if self.ids.count(i) > 1)
            raise VLToolsError(f"{self.path}: duplicate image id {dup!r} in /ids")
        for name in self.fields:
            self._check_layout(name)
            if self.handle[name].shape[0] != len(self.ids):
                raise VLToolsError(
                    f"{self.path}: /{name} has {self.handle[name].shape[0]} rows but /ids has {len(self.ids)}; "
                    f"the file is incomplete, {REWRITE}"
                )
        self._check_counts()

    def _check_layout(self, name: str) -> None:
        """Dataset `name` must have the axes `AXES` gives it and numbers of the kind its writer stores (floats or
        integers): one line naming the dataset otherwise."""
        dataset = self.handle[name]
        axes = AXES[name]
        number = np.dtype(field_dtypes("float32")[name]).kind
        fits = len(dataset.shape) == len(axes) and all(not isinstance(axis, int) or size == axis
                                                       for size, axis in zip(dataset.shape, axes, strict=True))
        if not fits or dataset.dtype.kind not in ("f" if number == "f" else "iu"):
            wanted = "floats" if number == "f" else "integers"
            raise VLToolsError(f"{self.path}: /{name} is {dataset.dtype} of shape {tuple(dataset.shape)}, not the "
                               f"{len(axes)}-d {wanted} ({' x '.join(map(str, axes))}) a features file holds; "
                               f"{REWRITE}")

    def _check_counts(self) -> None:
        """Every image's /num_regions must be one of 0..K, K the region rows each image has: a count outside would
        mask the wrong rows (-1 keeps all but the last) and change its similarities silently."""
        width = next((self.handle[name].shape[1] for name in ("regions", "boxes") if name in self.handle), None)
        if "num_regions" not in self.handle or width is None:
            return
        counts = read(self.handle["num_regions"])
        bad = np.flatnonzero((counts < 0) | (counts > width))
        if len(bad):
            row = int(bad[0])
            raise VLToolsError(f"{self.path}: image id {self.ids[row]!r}: /num_regions is {int(counts[row])}, outside "
                               f"0..{width} (the region rows of each image); {REWRITE}")

    @property
    def fields(self) -> list[str]:
        return [name for name in FIELDS if name in self.handle]

    @property
    def failed(self) -> list[str]:
        """The "id<TAB>reason" lines of images the writing stage skipped (empty when none were recorded)."""
        if isinstance(self.handle, PartsHandle):
            return [line for part in self.parts for line in part.failed]
        return decode_strings(self.handle["failed"][:]) if "failed" in self.handle else []

    def shape(self, field: str) -> tuple[int, ...]:
        return tuple(self.handle[field].shape)

    def require(self, ids: Iterable[str], source: object, fix: str = "extract its features or remove its captions",
                what: str = "image_id") -> None:
        """Every id must be in this file: otherwise one line naming `source` (the file that named the ids), the
        first missing id, how many are missing, and `fix`."""
        missing = [i for i in dict.fromkeys(ids) if i not in self.index]
        if missing:
            raise VLToolsError(f"{source}: {what} {missing[0]!r} is not in {self.path} ({len(missing)} image(s) "
                               f"missing); {fix}")

    def rows(self, ids: Sequence[str]) -> np.ndarray:
        """Row numbers of `ids`; an unknown id is a one-line error naming it."""
        try:
            return np.array([self.index[i] for i in ids], dtype=np.int64)
        except KeyError as exc:
            raise VLToolsError(f"{self.path}: image id {exc.args[0]!r} is not in this features file") from None

    def read(self, ids: Sequence[str], fields: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """The datasets `fields` (default: all present) for `ids`, rows in the order of `ids`."""
        rows = self.rows(ids)
        unique_rows, position = np.unique(rows, return_inverse=True)
        # consecutive rows in file order (a block of a file's images in order): one slice read, no reordering copy
        run = len(rows) > 0 and bool((np.diff(rows) == 1).all())
        selection = slice(int(rows[0]), int(rows[-1]) + 1) if run else unique_rows if len(rows) else slice(0, 0)
        out = {}
        for name in fields or self.fields:
            if name not in self.handle:
                raise VLToolsError(f"{self.path}: has no /{name} dataset")
            block = read(self.handle[name], selection)
            refuse_nonfinite(self.path, name, block, self.ids, unique_rows, "image id")
            # features held in memory give a view of their array: copied, as a reordered read is
            out[name] = block if run and block.base is None else block[position]
        return out

    def read_range(self, field: str, start: int, stop: int) -> np.ndarray:
        """Rows start..stop-1 of `field` in file order (checksums verified, non-finite rows refused)."""
        block = read(self.handle[field], slice(start, stop))
        refuse_nonfinite(self.path, field, block, self.ids, range(start, stop), "image id")
        return block

    def read_rows(self, field: str, rows: Sequence[int]) -> np.ndarray:
        """Rows `rows` (any order, repeats allowed) of `field`, read one by one: h5py's fancy indexing of
        scattered rows is several times slower (checksums verified, non-finite rows refused)."""
        dataset = self.handle[field]
        block = np.stack([read(dataset, int(row)) for row in rows]) if len(rows) else read(dataset, slice(0, 0))
        refuse_nonfinite(self.path, field, block, self.ids, rows, "image id")
        return block

    def iter_batches(self, batch_size: int, ids: Sequence[str] | None = None,
                     fields: Sequence[str] | None = None) -> Iterator[tuple[list[str], dict[str, np.ndarray]]]:
        """Stream (ids, arrays) batches over `ids` (default: the file's order)."""
        ids = list(self.ids if ids is None else ids)
        for start in range(0, len(ids), batch_size):
            chunk = ids[start:start + batch_size]
            yield chunk, self.read(chunk, fields)

    def __len__(self) -> int:
        return len(self.ids)

    def close(self) -> None:
        self.handle.close()

    def __enter__(self) -> FeaturesReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_compatible(reference: FeaturesReader, other: FeaturesReader) -> None:
    """Raise a one-line error naming `other` when its options, fields, shapes or dtypes differ (the options alone
    where either holds no image)."""
    mine, theirs = comparable_attrs(reference.attrs), comparable_attrs(other.attrs)
    for key in sorted(set(mine) | set(theirs)):
        if mine.get(key) != theirs.get(key):
            raise VLToolsError(f"{other.path}: attribute {key!r} is {theirs.get(key)!r} but {reference.path} has "
                               f"{mine.get(key)!r}; only files made with the same options can be merged")
    if not len(reference) or not len(other):
        return      # a file of no image (a shard that got none) has no datasets to compare
    if reference.fields != other.fields:
        raise VLToolsError(f"{other.path}: has datasets {other.fields} but {reference.path} has {reference.fields}; "
                           "only files made with the same options can be merged")
    for name in reference.fields:
        a, b = reference.handle[name], other.handle[name]
        if a.shape[1:] != b.shape[1:] or a.dtype != b.dtype:
            raise VLToolsError(f"{other.path}: /{name} rows are {b.shape[1:]} {b.dtype} but {reference.path} has "
                               f"{a.shape[1:]} {a.dtype}; only files made with the same options can be merged")


def features_extractor(attrs: Mapping[str, object]) -> str | None:
    """What computed a features file's regions, in the words checkpoints record it (`match` compares the two): the
    `extractor` attribute (`bottom-up`), `bottom-up` for the released features imported by `convert bottom-up`,
    else the backbone, its weights and the regions mode; None when unknown (features imported from elsewhere)."""
    if attrs.get("extractor"):
        return str(attrs["extractor"])
    backbone = attrs.get("backbone")
    if backbone == BOTTOM_UP:
        return BOTTOM_UP
    if not backbone or attrs.get("weights") in (None, "unknown"):
        return None
    return f"{backbone} ({attrs['weights']}), {attrs.get('regions', 'unknown')} regions"

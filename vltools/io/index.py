"""Saved search indexes (`vltools index`): one HDF5 file holding a FAISS index serialized to bytes (`/index`,
checksummed like every numeric dataset), the id of each of its rows (`/ids`) and its provenance as attributes
(the embeddings file it was built from, their model and checkpoint digest, side, metric, factory, dims, count).

One file written atomically, so the ids and the model can never drift from the vectors, a damaged copy fails
its checksum, and `inspect` describes it; this module reads and writes bytes only, without faiss (the bytes
become an index in `vltools.infer.index`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vltools.errors import input_error
from vltools.io.fields import INTEGER, REQUIRED, TEXT, field, optional
from vltools.io.hdf5 import (
    OutputFile,
    attributes,
    create_dataset,
    open_h5,
    read,
    read_strings,
    set_attrs,
    write_strings,
)
from vltools.io.output import written

REBUILD = "rebuild it with vltools index"
# the attributes a saved index is read with: (kind, default when absent)
ATTRIBUTES = {"metric": (TEXT, REQUIRED), "factory": (TEXT, REQUIRED), "dims": (INTEGER, REQUIRED),
              "count": (INTEGER, REQUIRED), "side": (TEXT, ""), "checkpoint_digest": (optional(TEXT), None)}
CHUNK_BYTES = 1 << 20


@dataclass
class IndexFile:
    """A saved index as stored: ids, the serialized FAISS index, and its provenance."""

    path: Path
    ids: list[str]
    data: np.ndarray
    metric: str
    factory: str
    dims: int
    side: str
    checkpoint_digest: str | None
    attrs: dict[str, object]


def write_index(path: str | os.PathLike | None, ids: Sequence[str], data: np.ndarray,
                attrs: dict[str, object]) -> None:
    """Write the serialized index `data` (uint8) with its row ids and `attrs`, atomically (or to stdout)."""
    data = np.asarray(data, dtype=np.uint8)
    with written(path) as target, OutputFile(target) as handle:
        handle.check_room(data.nbytes)
        set_attrs(handle, "index", {**attrs, "count": len(ids)})
        write_strings(handle, "ids", ids)
        create_dataset(handle, "index", data=data, chunks=(max(1, min(len(data), CHUNK_BYTES)),))
        handle.check()


def read_index(path: str | os.PathLike) -> IndexFile:
    """Read and check a saved index: both datasets, one id per indexed row, and the metric, factory and dims."""
    with open_h5(path, "index") as handle:
        for name in ("ids", "index"):
            if name not in handle:
                raise input_error(path, None, f"index file lacks the /{name} dataset", REBUILD)
        ids = read_strings(handle, "ids")
        data = read(handle["index"])
        attrs = attributes(handle)
    typed = {key: field(attrs, key, kind, path, REBUILD, what="attribute", default=default)
             for key, (kind, default) in ATTRIBUTES.items()}
    if typed["count"] != len(ids):
        raise input_error(path, None, f"index file records {typed['count']} rows but holds {len(ids)} ids", REBUILD)
    if data.dtype != np.uint8 or data.ndim != 1:
        raise input_error(path, None, f"/index is {data.dtype} of shape {data.shape}, not serialized bytes", REBUILD)
    return IndexFile(Path(path), ids, data, typed["metric"], typed["factory"], typed["dims"], typed["side"],
                     typed["checkpoint_digest"], attrs)

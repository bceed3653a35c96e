"""Rows of named arrays, one row per id, appended to an HDF5 file: features files (vltools.io.features) and the
chunks of a resumable run's checkpoint (vltools.io.checkpoint). Every value is checked as it is written: a row that
would be stored NaN or infinite is refused naming its id, before anything of it is written."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from vltools.errors import VLToolsError
from vltools.io.hdf5 import OutputFile, create_dataset, decode_strings, set_attrs, string_dtype
from vltools.io.provenance import ids_digest

IDS_CHECKSUM = "ids_checksum"
NONFINITE_FIX = "check the weights and the image"


class RowsWriter:
    """Append rows for ids to a new HDF5 file of `kind` with `attrs`; a dataset per array name is created on the first
    append, chunked by row. Floats are stored as `dtype` unless `dtypes` names another for that array. `name` is
    what errors about rows call the file (default `path`: a temporary part of an output is never named to the
    user); `id_kind` and `fix` word a refused non-finite row ("image id 'x': ... check the weights and the image").
    A failed write (full disk, file size limit) is an OSError naming `path`, raised by the `add` or `close` it
    happened in; the file is then closed, for the caller to remove."""

    def __init__(self, path: str | os.PathLike, kind: str, attrs: Mapping[str, object], dtype: str = "float32",
                 name: str | os.PathLike | None = None, id_kind: str = "id", fix: str = NONFINITE_FIX,
                 dtypes: Mapping[str, object] | None = None) -> None:
        if dtype not in ("float16", "float32"):
            raise VLToolsError(f"{kind} dtype must be float16 or float32, not {dtype}")
        self.path = Path(path)
        self.name = str(path if name is None else name)
        self.dtype = np.dtype(dtype)
        self.dtypes = {key: np.dtype(value) for key, value in (dtypes or {}).items()}
        self.id_kind, self.fix = id_kind, fix
        self.handle = OutputFile(self.path, "w")
        set_attrs(self.handle, kind, {**attrs, "dtype": dtype})
        self.handle.create_dataset("ids", shape=(0,), maxshape=(None,), dtype=string_dtype(), chunks=(1024,))
        self.ids: set[str] = set()

    def add(self, ids: Sequence[str], **arrays: np.ndarray) -> None:
        """Append rows for `ids`: each array has len(ids) rows."""
        duplicate = [i for i in ids if i in self.ids]
        if duplicate or len(set(ids)) != len(ids):
            raise VLToolsError(f"{self.name}: duplicate {self.id_kind} {(duplicate or list(ids))[0]!r}")
        start = self.handle["ids"].shape[0]
        try:
            self._write(ids, start, arrays)
            self.handle.check()
        except OSError:
            self.handle.close()
            raise
        self.ids.update(ids)

    def _write(self, ids: Sequence[str], start: int, arrays: Mapping[str, object]) -> None:
        """Append `arrays` at row `start` (checked, cast, and refused before anything is written when they cannot
        fit), then their ids."""
        n = len(ids)
        stored_arrays = stored_rows(self.name, ids, arrays, self.dtype, self.dtypes, self.id_kind, self.fix)
        self.handle.check_room(sum(stored.nbytes for stored in stored_arrays.values()))
        for name, stored in sorted(stored_arrays.items()):     # by name: the same file whatever the callers' order
            if name not in self.handle:
                rest = stored.shape[1:]
                create_dataset(self.handle, name, shape=(start, *rest), maxshape=(None, *rest), dtype=stored.dtype,
                               chunks=(1, *rest) if rest else (1024,))
            dataset = self.handle[name]
            dataset.resize(start + n, axis=0)
            dataset[start:start + n] = stored
        self.handle["ids"].resize(start + n, axis=0)
        self.handle["ids"][start:start + n] = np.array(list(ids), dtype=object)

    def set_attr(self, name: str, value: object) -> None:
        """Record an extra attribute."""
        self.handle.attrs[name] = value

    def close(self) -> None:
        """Record the checksum of /ids (strings cannot carry HDF5's checksum filter) and close the file; raise
        a write that failed (OSError naming the file)."""
        if self.handle:
            self.handle.attrs[IDS_CHECKSUM] = ids_digest(decode_strings(self.handle["ids"][:]))
        self.handle.close()
        self.handle.check()

    def abandon(self) -> None:
        """Close the file after a failure, raising nothing: the caller removes it."""
        self.handle.close()

    def __enter__(self) -> RowsWriter:
        return self

    def __exit__(self, kind: object, exc: BaseException | None, trace: object) -> None:
        if exc is None:
            self.close()
        else:
            self.abandon()


def stored_rows(name: object, ids: Sequence[str], arrays: Mapping[str, object], dtype: np.dtype,
                dtypes: Mapping[str, np.dtype] | None = None, id_kind: str = "id",
                fix: str = NONFINITE_FIX) -> dict[str, np.ndarray]:
    """`arrays` (one row per id of `ids`) as they are stored: floats as `dtype` unless `dtypes` names another for
    that array, the rest as they are (no copy where an array already has its stored dtype). A row that would be
    stored non-finite is refused, naming `name` (what errors call the file) and the row's `id_kind` id; when its
    values were finite before the cast, they overflow float16 (largest 65504): the message says to write float32."""
    stored = {}
    for key, given in arrays.items():
        value = np.asarray(given)
        if value.shape[0] != len(ids):
            raise ValueError(f"{key} has {value.shape[0]} rows for {len(ids)} ids")
        wanted = (dtypes or {}).get(key, dtype if np.issubdtype(value.dtype, np.floating) else value.dtype)
        with np.errstate(over="ignore"):    # an overflow is reported below, naming the row
            stored[key] = value.astype(wanted, copy=False)
        if not np.issubdtype(stored[key].dtype, np.floating):
            continue
        bad = ~np.isfinite(stored[key].reshape(len(ids), -1)).all(axis=1)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            where = f"{name}: {id_kind} {ids[row]!r}"
            if np.isfinite(value[row]).all():
                raise VLToolsError(f"{where}: /{key} values exceed float16's range (largest 65504); rerun with "
                                   "--dtype float32")
            raise VLToolsError(f"{where}: the model gave NaN or infinite /{key} values; {fix}")
    return stored

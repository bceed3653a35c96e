"""Opening and writing vltools HDF5 files of any kind, with one-line errors for bad files."""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np

from vltools.errors import VLToolsError, first_line
from vltools.io.atomic import binary_output
from vltools.io.provenance import provenance

FORMAT_VERSION = 1
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def string_dtype() -> h5py.Datatype:
    """Variable-length UTF-8 strings, the type of every id dataset."""
    return h5py.string_dtype(encoding="utf-8")


def decode_strings(values: np.ndarray) -> list[str]:
    """Ids as Python strings, whether h5py returned bytes or str."""
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values]


def is_hdf5(path: str | os.PathLike) -> bool:
    """Whether `path` starts with the HDF5 signature (so stages taking HDF5 or JSONL can tell them apart);
    `-` (standard input) is never HDF5."""
    if str(path) == "-":
        return False
    try:
        with open(path, "rb") as stream:
            return stream.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE
    except FileNotFoundError:
        raise VLToolsError(f"{path}: no such file") from None


def open_h5(path: str | os.PathLike, kind: str | None = None) -> h5py.File:
    """Open a vltools HDF5 file for reading; check it is HDF5 and, if `kind` is given, of that kind."""
    path = Path(path)
    if not path.exists():
        raise VLToolsError(f"{path}: no such file")
    try:
        handle = h5py.File(path, "r")
    except OSError as exc:
        raise VLToolsError(
            f"{path}: not a readable HDF5 file ({exc.__class__.__name__}); it may be truncated, "
            "rerun the stage that wrote it"
        ) from exc
    found = file_kind(handle)
    if kind is not None and found != kind:
        handle.close()
        shown = found if found else "not a vltools file (no 'format' attribute)"
        raise VLToolsError(f"{path}: expected a vltools {kind} file, found {shown}")
    return handle


def file_kind(handle: h5py.File) -> str | None:
    """The kind (`features`, `proxy`, ...) a file declares in its `format` attribute, if any."""
    fmt = handle.attrs.get("format")
    if isinstance(fmt, bytes):
        fmt = fmt.decode()
    if not isinstance(fmt, str) or not fmt.startswith("vltools."):
        return None
    return fmt.split(".", 1)[1]


def set_attrs(handle: h5py.File, kind: str, attrs: dict[str, object]) -> None:
    """Write the `format`, `format_version` and provenance attributes, plus `attrs`."""
    handle.attrs["format"] = f"vltools.{kind}"
    handle.attrs["format_version"] = FORMAT_VERSION
    for key, value in {**provenance(), **attrs}.items():
        handle.attrs[key] = value if not isinstance(value, (list, tuple, dict)) else str(value)


def checksummed(dtype: np.dtype | type | str, shape: tuple[int, ...], chunks: tuple[int, ...] | bool | None = None,
                ) -> dict[str, object]:
    """create_dataset keywords that store a Fletcher-32 checksum with every chunk of a numeric dataset, so that
    a corrupted file is detected on read (h5py verifies it) instead of propagating garbage. Numbers only:
    HDF5 cannot filter variable-length strings. Chunked layout is required, so it is turned on when needed."""
    if np.dtype(dtype).kind not in "biuf" or (not chunks and (0 in shape or not shape)):
        return {"chunks": chunks} if chunks is not None else {}
    return {"chunks": True if chunks is None else chunks, "fletcher32": True}


def create_dataset(handle: h5py.Group, name: str, data: object = None, **kwargs: object) -> h5py.Dataset:
    """`handle.create_dataset` with checksums on numeric data (see `checksummed`); the one way to add a dataset
    to a vltools HDF5 file."""
    if data is not None and not isinstance(data, np.ndarray):
        data = np.asarray(data)
    dtype = kwargs.get("dtype") or (data.dtype if data is not None else np.float32)
    shape = kwargs.get("shape") or (data.shape if data is not None else ())
    if not (isinstance(dtype, h5py.Datatype) or h5py.check_string_dtype(np.dtype(dtype))):
        kwargs.update(checksummed(dtype, tuple(shape), kwargs.pop("chunks", None)))
    return handle.create_dataset(name, data=data, **kwargs)


def read(dataset: h5py.Dataset, selection: object = ()) -> np.ndarray:
    """`dataset[selection]`; a failed checksum or unreadable chunk is a one-line error naming file and dataset."""
    try:
        return dataset[selection]
    except OSError as exc:
        raise VLToolsError(
            f"{dataset.file.filename}: {dataset.name} is corrupt (checksum mismatch or unreadable data: "
            f"{first_line(exc)}); rerun the stage that wrote it"
        ) from None


def verify(handle: h5py.File, finite: tuple[str, ...] = (), block_bytes: int = 1 << 26) -> None:
    """Read every dataset of `handle` in blocks, so every checksum is checked; datasets named in `finite`
    must hold only finite values (the error names the first bad row, by its id when /ids is there)."""
    datasets: list[h5py.Dataset] = []
    handle.visititems(lambda _, obj: datasets.append(obj) if isinstance(obj, h5py.Dataset) else None)
    for dataset in datasets:
        if not dataset.shape:
            read(dataset)
            continue
        row_bytes = max(1, dataset.dtype.itemsize * int(np.prod(dataset.shape[1:])))
        step = max(1, block_bytes // row_bytes)
        check = dataset.name.lstrip("/") in finite and dataset.dtype.kind == "f"
        for start in range(0, dataset.shape[0], step):
            block = read(dataset, slice(start, start + step))
            if check and not np.isfinite(block).all():
                row = start + int(np.argwhere(~np.isfinite(block.reshape(len(block), -1)).all(axis=1))[0][0])
                where = f"row {row}"
                if "ids" in handle and handle["ids"].shape[0] > row:
                    where = f"id {decode_strings(read(handle['ids'], slice(row, row + 1)))[0]!r} (row {row})"
                raise VLToolsError(f"{handle.filename}: {dataset.name} {where} holds NaN or infinite values; "
                                   "the file is corrupt or was computed from bad input, rerun the stage that "
                                   "wrote it")


def write_arrays(path: str | os.PathLike | None, kind: str, arrays: dict[str, object],
                 attrs: dict[str, object] | None = None) -> None:
    """Write a small HDF5 file of whole arrays (string lists become id datasets), atomically or to stdout."""
    with binary_output(path) as target, h5py.File(target, "w") as handle:
        set_attrs(handle, kind, attrs or {})
        for name, value in arrays.items():
            if isinstance(value, list) and (not value or isinstance(value[0], str)):
                handle.create_dataset(name, data=np.array(value, dtype=object), dtype=string_dtype())
            else:
                create_dataset(handle, name, data=np.asarray(value))

"""Opening and writing vltools HDF5 files of any kind, with one-line errors for bad files."""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np

from vltools.errors import VLToolsError
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


def write_arrays(path: str | os.PathLike | None, kind: str, arrays: dict[str, object],
                 attrs: dict[str, object] | None = None) -> None:
    """Write a small HDF5 file of whole arrays (string lists become id datasets), atomically or to stdout."""
    with binary_output(path) as target, h5py.File(target, "w") as handle:
        set_attrs(handle, kind, attrs or {})
        for name, value in arrays.items():
            if isinstance(value, list) and (not value or isinstance(value[0], str)):
                handle.create_dataset(name, data=np.array(value, dtype=object), dtype=string_dtype())
            else:
                handle.create_dataset(name, data=np.asarray(value))

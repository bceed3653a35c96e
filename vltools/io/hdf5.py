"""Opening and writing vltools HDF5 files of any kind, with one-line errors for bad files."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import h5py
import numpy as np

from vltools.errors import VLToolsError, first_line, require_file
from vltools.io.fields import TEXT, field
from vltools.io.held import FeaturesInMemory
from vltools.io.kinds import same_file, sniff
from vltools.io.output import written
from vltools.io.progress import log
from vltools.io.provenance import ids_digest, provenance
from vltools.io.shards import is_part_set, part_files
from vltools.io.write_errors import DeferredWrites, check_room

FORMAT_VERSION = 1
_UNCHECKED: set[tuple[str, str]] = set()   # (file, list) read without a checksum and warned about in this process


def string_dtype() -> h5py.Datatype:
    """Variable-length UTF-8 strings, the type of every id dataset."""
    return h5py.string_dtype(encoding="utf-8")


def decode_strings(values: np.ndarray) -> list[str]:
    """Ids as Python strings, whether h5py returned bytes or str."""
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values]


def digest_attribute(name: str) -> str:
    """The attribute recording the digest of the string dataset `name` (`ids_digest` for /ids)."""
    return f"{name}_digest"


def write_strings(handle: h5py.Group, name: str, values: Sequence[str]) -> None:
    """Write the string dataset `name` (ids, splits, words) and the digest of its values (`digest_attribute`):
    strings cannot carry HDF5's checksum filter, so `read_strings` checks them against it instead."""
    values = list(values)
    handle.create_dataset(name, data=np.array(values, dtype=object), dtype=string_dtype())
    handle.attrs[digest_attribute(name)] = ids_digest(values)


def read_strings(handle: h5py.Group, name: str, digest: str | None = None) -> list[str]:
    """The strings of dataset `name`, checked against the digest the file records for them (the attribute
    `digest`, default `digest_attribute(name)`; a file without one is read unchecked, with a warning once per file
    and list): two ids swapped or one renamed would otherwise name the wrong rows silently. The one way an id list
    of a vltools file is read."""
    values = decode_strings(read(handle[name]))
    key = digest or digest_attribute(name)
    if key not in handle.attrs:     # features in memory have no file to have been edited
        path = None if isinstance(handle, FeaturesInMemory) else handle.file.filename
        if path is not None and (path, name) not in _UNCHECKED:
            _UNCHECKED.add((path, name))
            log.warning("%s: /%s has no checksum (attribute %r: the file was edited, or written before vltools "
                        "recorded one), so its ids are read unchecked; rerun the stage that wrote it", path, name, key)
        return values
    path = handle.file.filename
    saved = field({key: plain(handle.attrs[key])}, key, TEXT, path, REWRITE, what="attribute")
    if saved != ids_digest(values):
        raise VLToolsError(f"{path}: /{name} does not match its checksum (attribute {key!r}); the file was "
                           f"edited or is corrupt, {REWRITE}")
    return values


def is_hdf5(path: str | os.PathLike) -> bool:
    """Whether `path` starts with the HDF5 signature (so stages taking HDF5 or JSONL can tell them apart);
    `-` (standard input) is never HDF5."""
    return str(path) != "-" and sniff(path) == "hdf5"   # a named pipe would block: refused by name first


REWRITE = "rerun the stage that wrote it, or restore the file from a copy"


def from_h5py(exc: BaseException) -> bool:
    """Whether `exc` was raised inside h5py or HDF5 (its innermost frame is h5py's), as a damaged file's
    metadata makes them raise KeyError, OSError, RuntimeError, TypeError or ValueError."""
    trace = exc.__traceback__
    while trace is not None and trace.tb_next is not None:
        trace = trace.tb_next
    return trace is not None and "h5py" in Path(trace.tb_frame.f_code.co_filename).parts


def damaged(path: object, exc: BaseException, what: str = "") -> VLToolsError:
    """The one-line error for an HDF5 file h5py cannot read: it names the file (and `what` in it: a dataset,
    an attribute) and says it is damaged."""
    detail = first_line(Exception(*exc.args) if isinstance(exc, KeyError) else exc)    # a KeyError's str quotes it
    return VLToolsError(f"{path}: {what or 'the HDF5 file'} is damaged (checksum mismatch or unreadable HDF5 "
                        f"structure: {detail}); {REWRITE}")


def _missing(exc: BaseException) -> bool:
    """Whether an h5py KeyError says an object or attribute is absent (not damaged): `get` and `in` rely on it."""
    return isinstance(exc, KeyError) and any(text in str(exc) for text in ("doesn't exist", "can't locate"))


@contextlib.contextmanager
def reading(path: object, what: str = "") -> Iterator[None]:
    """Turn any h5py/HDF5 error raised in the block into the one-line `damaged` error naming `path`."""
    try:
        yield
    except VLToolsError:
        raise
    except Exception as exc:
        if not from_h5py(exc) or _missing(exc):
            raise
        raise damaged(path, exc, what) from None


class _Checked:
    """What every object of a file opened by `open_h5` shares: its attributes' damaged storage is the one-line
    `damaged` error naming the file."""

    _vl_path: object

    @property
    def attrs(self) -> h5py.AttributeManager:
        checked = _CheckedAttrs(self)
        checked._vl_path = self._vl_path
        return checked


class _CheckedLookup(_Checked):
    """Groups and files of `open_h5`: a damaged object header or link is the one-line `damaged` error, and what
    they hold is checked in turn."""

    def __getitem__(self, name: str) -> object:
        with reading(self._vl_path, f"/{str(name).lstrip('/')}"):
            return _checked(super().__getitem__(name), self._vl_path)

    def __contains__(self, name: object) -> bool:
        with reading(self._vl_path):
            return super().__contains__(name)


class _CheckedAttrs(h5py.AttributeManager):
    """Attributes whose damaged storage is the one-line `damaged` error."""

    _vl_path: object

    def __getitem__(self, name: str) -> object:
        with reading(self._vl_path, f"attribute {name!r}"):
            return super().__getitem__(name)

    def __iter__(self) -> Iterator[str]:
        with reading(self._vl_path, "its attributes"):
            yield from list(super().__iter__())

    def __contains__(self, name: object) -> bool:
        with reading(self._vl_path):
            return super().__contains__(name)


class _CheckedGroup(_CheckedLookup, h5py.Group):
    """A group of a file opened by `open_h5`."""


class _CheckedDataset(_Checked, h5py.Dataset):
    """A dataset of a file opened by `open_h5`: a failed read (checksum, unreadable chunk, damaged heap) is the
    one-line `damaged` error naming the file and the dataset."""

    _vl_name: str

    def __getitem__(self, args: object, new_dtype: object = None) -> np.ndarray:
        with reading(self._vl_path, self._vl_name):
            return super().__getitem__(args, new_dtype)


class CheckedFile(_CheckedLookup, h5py.File):
    """A vltools HDF5 file open for reading (`open_h5`): every h5py/HDF5 error raised while it is read, on
    lookup, read or attribute, or anywhere in its `with` block, is one line naming the file."""

    def __exit__(self, kind: object, exc: BaseException | None, trace: object) -> None:
        super().__exit__(kind, exc, trace)
        if isinstance(exc, Exception) and not isinstance(exc, VLToolsError) and from_h5py(exc) \
                and not _missing(exc):
            raise damaged(self._vl_path, exc) from None


def _checked(item: object, path: object) -> object:
    """`item` (a group or dataset h5py opened) as its checked kind."""
    if isinstance(item, h5py.Dataset):
        checked = _CheckedDataset(item.id, readonly=item.file.mode == "r")
        checked._vl_name = item.name
    elif isinstance(item, h5py.Group):
        checked = _CheckedGroup(item.id)
    else:
        return item
    checked._vl_path = path
    return checked


def open_h5(path: str | os.PathLike, kind: str | None = None) -> CheckedFile:
    """Open a vltools HDF5 file for reading; check it is HDF5 and, if `kind` is given, of that kind. The one
    way vltools reads HDF5: every later h5py/HDF5 error on it is one line naming the file (`CheckedFile`)."""
    path = require_file(path)
    try:
        handle = CheckedFile(path, "r")
    except OSError as exc:
        raise VLToolsError(
            f"{path}: not a readable HDF5 file ({exc.__class__.__name__}); it may be truncated, "
            "rerun the stage that wrote it"
        ) from exc
    except Exception as exc:
        if not from_h5py(exc):
            raise
        raise damaged(path, exc) from None
    handle._vl_path = path
    try:
        found = file_kind(handle)
    except VLToolsError:
        handle.close()
        raise
    if kind is not None and found != kind:
        handle.close()
        shown = found if found else "not a vltools file (no 'format' attribute)"
        raise VLToolsError(f"{path}: expected a vltools {kind} file, found {shown}")
    return handle


class OutputFile(h5py.File):
    """An HDF5 file being written (`mode` "w" creates or empties it, "a" opens or creates it): the one way vltools
    writes HDF5. HDF5 never sees a failed write (after one, closing the file crashes the process): the first
    write error (full disk, over the file size limit, a failing device) is kept, and `check` raises it, as an
    OSError naming `path`, for the caller to give up the file. `close` never raises; its `with` block
    checks after closing, unless the block already failed."""

    def __init__(self, path: str | os.PathLike, mode: str = "w") -> None:
        self.stream = DeferredWrites(path, truncate=mode == "w")
        try:
            super().__init__(self.stream, mode)
        except BaseException:
            self.stream.close()
            raise

    def check(self) -> None:
        """Raise the first write error (OSError naming the file), if any."""
        self.stream.check()

    def check_room(self, size: int) -> None:
        """Refuse (OSError) to add `size` bytes the file's disk or the file size limit has no room for."""
        check_room(self.stream.path, size)

    def close(self) -> None:
        """Close the file (datasets first, as h5py does) and the stream under it."""
        if self.id.valid:
            super().close()
        self.stream.close()

    def __exit__(self, kind: object, exc: BaseException | None, trace: object) -> None:
        self.close()
        if exc is None:
            self.check()


def plain(value: object) -> object:
    """An attribute's value as plain Python: numpy scalars and arrays as numbers and lists, UTF-8 bytes as a string
    (other bytes stay bytes, which no text field accepts)."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    if isinstance(value, (np.generic, np.ndarray)):
        return plain(value.item()) if isinstance(value, np.generic) else [plain(item) for item in value.tolist()]
    return value


def attributes(handle: h5py.File | h5py.Group) -> dict[str, object]:
    """Every attribute of an open file (or group) as plain Python values (`plain`), for the readers to take each
    through `vltools.io.fields.field` with its kind."""
    return {key: plain(value) for key, value in handle.attrs.items()}


def file_kind(handle: h5py.File) -> str | None:
    """The kind (`features`, `proxy`, ...) a file declares in its `format` attribute, if any."""
    fmt = handle.attrs.get("format")
    if isinstance(fmt, bytes):
        fmt = fmt.decode()
    if not isinstance(fmt, str) or not fmt.startswith("vltools."):
        return None
    return fmt.split(".", 1)[1]


def hdf5_kind(path: str | os.PathLike | FeaturesInMemory) -> str | None:
    """The vltools kind of an HDF5 file (`features`, `embeddings`, ...; "hdf5" when it declares none), or None
    when the file is not HDF5 at all (so it is read as JSONL); `-` (standard input) is never HDF5. Features held in
    memory (`FeaturesInMemory`, read as their file) are of the kind "features"; a folder of parts
    (vltools.io.shards), of its parts' kind."""
    if isinstance(path, FeaturesInMemory):
        return "features"
    if not is_hdf5(path):
        return None
    return _declared_kind(same_file(part_files(path)[0] if is_part_set(path) else path))


@functools.lru_cache(maxsize=256)
def _declared_kind(key: tuple[object, ...]) -> str:
    """The kind an HDF5 file declares, read once per process while the file stays the same (`same_file`)."""
    with open_h5(key[0]) as handle:
        return file_kind(handle) or "hdf5"


def set_attrs(handle: h5py.File, kind: str, attrs: dict[str, object]) -> None:
    """Write the `format`, `format_version` and provenance attributes, plus `attrs` (those it names override the
    provenance's), in the order of their names: a file rewritten with the same attributes is the same bytes (a
    set's parts joined by `vltools merge`, the file one process writes)."""
    handle.attrs["format"] = f"vltools.{kind}"
    handle.attrs["format_version"] = FORMAT_VERSION
    for key, value in sorted({**provenance(), **attrs}.items()):
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


def read(dataset: object, selection: object = ()) -> np.ndarray:
    """`dataset[selection]`; a failed checksum or unreadable chunk is a one-line error naming file and dataset. The
    array of a dataset held in memory (`FeaturesInMemory`) is indexed as it is (a slice: a view of it), and the
    parts of a set (`vltools.io.features.PartsDataset`) read each part through here."""
    if not isinstance(dataset, h5py.Dataset):
        return dataset[selection]
    with reading(dataset.file.filename, dataset.name):
        return dataset[selection]


def first_nonfinite(values: np.ndarray, negative_infinity: bool = False) -> int | None:
    """The first row (along the first axis) of `values` holding NaN or an infinity, or None when all are finite
    (integers always are); `negative_infinity` allows -inf (a log-probability of 0). The one non-finite check
    every numeric dataset a stage reads goes through, so that a NaN row is refused instead of ranked or
    decoded silently wrong."""
    values = np.asarray(values)
    if values.dtype.kind not in "fc" or values.size == 0:
        return None
    good = np.isfinite(values)
    if negative_infinity:
        good |= np.isneginf(values)
    if good.all():
        return None
    return int(np.flatnonzero(~good.reshape(len(good), -1).all(axis=1))[0]) if values.ndim else 0


def refuse_nonfinite(path: object, name: str, values: np.ndarray, ids: Sequence[str] | None = None,
                     rows: Sequence[int] | None = None, id_kind: str = "id") -> None:
    """Refuse `values` (rows `rows` of dataset `name`; default 0..n-1) when a row holds NaN or an infinity, in
    one line naming the file, the dataset and the first bad row by its id when `ids` (of every row) is given."""
    bad = first_nonfinite(values)
    if bad is None:
        return
    row = int(rows[bad]) if rows is not None else bad
    where = f"{id_kind} {ids[row]!r}" if ids is not None and row < len(ids) else f"row {row}"
    raise VLToolsError(f"{path}: {where}: /{name.lstrip('/')} holds NaN or infinite values; the file is corrupt "
                       "or was computed from bad input, rerun the stage that wrote it")


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
        check = dataset.name.lstrip("/") in finite
        for start in range(0, dataset.shape[0], step):
            block = read(dataset, slice(start, start + step))
            bad = first_nonfinite(block) if check else None
            if bad is not None:
                ids = decode_strings(read(handle["ids"])) if "ids" in handle else None
                refuse_nonfinite(handle.filename, dataset.name, block, ids, range(start, start + len(block)))


def write_arrays(path: str | os.PathLike | None, kind: str, arrays: dict[str, object],
                 attrs: dict[str, object] | None = None) -> None:
    """Write a small HDF5 file of whole arrays (string lists become id datasets with their digests: `write_strings`),
    atomically or to stdout."""
    with written(path) as target, OutputFile(target) as handle:
        handle.check_room(sum(value.nbytes for value in arrays.values() if isinstance(value, np.ndarray)))
        set_attrs(handle, kind, attrs or {})
        for name, value in arrays.items():
            if isinstance(value, list) and (not value or isinstance(value[0], str)):
                write_strings(handle, name, value)
            else:
                create_dataset(handle, name, data=np.asarray(value))

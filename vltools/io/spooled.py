"""Data given in memory where a file is read (the Python API: `score_caption(records, refs)` with the records
`vltools.convert` returned, `match(features, captions)` with arrays): each is written to a temporary file of its
kind in its place (`vltools.io.held` says which kind), so that it goes through the one reader of that kind of
file, with every check the file gets, and gives what the file would; or, for features where the stage reads them
through `FeaturesReader` alone, checked and cast as their file's writer would, and read by that reader in memory.

An error the reader raises names the temporary file; `spooled` names the argument instead, with the record's
index: `refs[2]: no 'image_id' or 'pair_id' field` for line 3 of the file written from `refs`.
"""

from __future__ import annotations

import numbers
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from vltools.errors import ArgumentError, VLToolsError, first_line, shown
from vltools.io.embeddings import write_embeddings_of
from vltools.io.features import FIELDS, FLOAT_FIELDS, FeaturesWriter, stored_features
from vltools.io.hdf5 import first_nonfinite
from vltools.io.held import Embeddings, FeaturesInMemory, held
from vltools.io.ids import ids_problem
from vltools.io.jsonl import json_writer
from vltools.io.scratch import scratch_folder

SUFFIXES = {"records": "jsonl", "document": "json", "features": "h5", "embeddings": "h5"}


def _array(value: object, name: str, what: str) -> np.ndarray:
    """`value` (a numpy array, a tensor on any device but `meta`, nested lists) as a numeric numpy array, or `name`'s
    error (raised by the conversion too: a tensor that cannot leave its device is no array to read)."""
    if getattr(value, "is_meta", False):
        raise ArgumentError(name, f"{what} is a tensor on the meta device, which holds no values; give one on the "
                                  "CPU or a GPU")
    try:
        if hasattr(value, "detach"):     # a torch tensor (torch is not imported here): off the graph and the GPU
            value = value.detach().cpu()
        array = np.asarray(value)
    except (TypeError, ValueError, RuntimeError, NotImplementedError) as exc:
        raise ArgumentError(name, f"{what} is not an array ({first_line(exc)})") from None
    if array.dtype.kind not in "biuf" or array.ndim == 0:
        raise ArgumentError(name, f"{what} must be a numeric array with one row per id, not {shown(value)}")
    return array


def _ids(value: object, name: str, what: str, rows: int | None = None, unique: bool = True) -> list[str]:
    """`value` (a list, a tuple or a 1-d numpy array of strings) as a list of ids, each usable as an id in a file
    is (one per row when `rows` is given; none twice when `unique`: see `ids_problem`), or `name`'s error."""
    if isinstance(value, np.ndarray) and value.ndim == 1:
        value = value.tolist()
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise ArgumentError(name, f"{what} must be a list of id strings, not {shown(value)}")
    if rows is not None and rows != len(value):
        raise ArgumentError(name, f"has {rows} rows for {len(value)} ids; give one row per id")
    if (problem := ids_problem(value, unique)) is not None:
        raise ArgumentError(name, f"{what}{problem}")
    return list(value)


def _finite(array: np.ndarray, ids: list[str], name: str, what: str, id_kind: str) -> None:
    """Refuse given values `what` of `name` holding NaN or an infinity, naming the first such row's id: the caller
    gave them (no model computed them, no file was corrupted)."""
    bad = first_nonfinite(array)
    if bad is not None:
        raise ArgumentError(name, f"{what}: {id_kind} {ids[bad]!r} holds NaN or infinite values; give finite numbers")


def _features(value: Mapping, name: str) -> tuple[list[str], dict[str, np.ndarray], str]:
    """`value`'s ids, its arrays by dataset, and the dtype its float datasets are stored as: float16 when all of
    them are, else float32 (no value changed by storing them)."""
    unknown = sorted(key for key in value if key != "ids" and key not in FIELDS)
    if unknown:
        raise ArgumentError(name, f"holds {unknown[0]!r}, not a features dataset; give 'ids' and arrays among "
                                  f"{', '.join(FIELDS)}")
    if "ids" not in value:
        raise ArgumentError(name, f"has no 'ids' key; give the id of each row as 'ids' beside "
                                  f"{', '.join(repr(key) for key in value)}")
    arrays = {key: _array(value[key], name, f"[{key!r}]") for key in FIELDS if key in value}
    ids = _ids(value["ids"], name, "['ids']")
    for key, array in arrays.items():
        if len(array) != len(ids):
            raise ArgumentError(name, f"[{key!r}] has {len(array)} rows for {len(ids)} ids; give one row per id")
        _finite(array, ids, name, f"[{key!r}]", "image id")
    floats = [arrays[key].dtype for key in FLOAT_FIELDS if key in arrays]
    return ids, arrays, "float16" if floats and all(kind == np.float16 for kind in floats) else "float32"


def _write_features(path: Path, value: Mapping, name: str) -> None:
    """`value` as a features file."""
    ids, arrays, dtype = _features(value, name)
    with FeaturesWriter(path, {"source": f"{name} (in memory)"}, dtype) as writer:
        writer.add(ids, **arrays)


def _held_features(value: Mapping, name: str) -> FeaturesInMemory:
    """`value` as the datasets its features file would hold, checked and cast as the file's writer checks and casts
    them (`stored_features`: no copy of an array already of its stored dtype), for `FeaturesReader` to read as the
    file."""
    ids, arrays, dtype = _features(value, name)
    label = f"{name} (in memory)"
    return FeaturesInMemory(label, {"ids": np.array(ids, dtype=object),
                                    **stored_features(label, ids, arrays, np.dtype(dtype))},
                            {"source": label, "dtype": dtype})


def _write_embeddings(path: Path, value: Embeddings, name: str) -> None:
    """`value` as an embeddings file, its ids and rows checked first."""
    vectors = _array(value.vectors, name, ".vectors")
    if vectors.ndim != 2:
        raise ArgumentError(name, f".vectors must be a 2-d array (one row per id), not of shape {vectors.shape}")
    ids = _ids(value.ids, name, ".ids", len(vectors))
    image_ids = (None if value.caption_image_ids is None
                 else _ids(value.caption_image_ids, name, ".caption_image_ids", len(vectors), unique=False))
    if not isinstance(value.side, str) or "\0" in value.side:
        raise ArgumentError(name, f".side must be 'images' or 'captions', not {shown(value.side)}")
    _finite(vectors, ids, name, ".vectors", "caption id" if value.side == "captions" else "image id")
    write_embeddings_of(path, Embeddings(ids, vectors, value.side, image_ids, _attrs(value.attrs, name)))


def _attrs(value: object, name: str) -> dict[str, object]:
    """`Embeddings.attrs` as the attributes of its file, each name and value one that an attribute can hold
    (`_attribute`), or `name`'s error."""
    if not isinstance(value, Mapping):
        raise ArgumentError(name, f".attrs must be a dict of the file's attributes, not {shown(value)}")
    for key, item in value.items():
        if not isinstance(key, str) or not key or "\0" in key:
            raise ArgumentError(name, f".attrs has the key {shown(key)}; an attribute's name is a non-empty string "
                                      "without NUL")
        _attribute(item, name, f".attrs[{key!r}]")
    return dict(value)


def _attribute(value: object, name: str, what: str) -> None:
    """Refuse, as `name`'s error, a value that its file's attribute cannot hold (h5py's TypeError or ValueError
    once the file was half written): an attribute is a string without NUL, a bool, a 64-bit integer, a real
    number, a numeric array, or a list, tuple or dict (written as its text, as provenance's are)."""
    if isinstance(value, str):
        usable = "\0" not in value
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        usable = -2**63 <= int(value) < 2**63
    elif isinstance(value, np.ndarray):
        usable = value.dtype.kind in "biuf"
    else:
        usable = isinstance(value, bool | np.bool_ | numbers.Real | list | tuple | dict)
    if not usable:
        raise ArgumentError(name, f"{what} must be a string without NUL, a number, a bool, or a list or dict of "
                                  f"them, as a file's attribute is, not {shown(value)}")


def _write(path: Path, value: dict | list | tuple, name: str) -> None:
    """`value` as one JSON document (a dict) or one record a line; a value JSON cannot hold is `name`'s error."""
    lines = [value] if isinstance(value, dict) else value
    with open(path, "w", encoding="utf-8") as stream:
        writer = json_writer(stream)
        for number, record in enumerate(lines):
            try:
                writer.write(record)
            except (TypeError, ValueError) as exc:    # a numpy number, a set, a cycle
                where = "" if isinstance(value, dict) else f"[{number}]"
                raise ArgumentError(name, f"{where} cannot be written as JSON ({first_line(exc)}); give plain "
                                          "str, int, float, list and dict values") from None


def _named(message: str, files: Mapping[str, Path]) -> str:
    """`message` with each temporary file named by its argument: line N as the record [N - 1], a dataset the
    features lack as their missing key ("first has no 'regions' key"), and, when it names one of them only, every
    other line it names too ("(first on line 8)" is "(first at second[7])")."""
    named = [name for name, path in files.items() if str(path) in message]
    for name, path in files.items():
        message = re.sub(rf"{re.escape(str(path))}: line (\d+)",
                         lambda found, name=name: f"{name}[{int(found.group(1)) - 1}]", message)
        message = message.replace(str(path), f"{name} (in memory)")
    message = re.sub(r"^(\S+) \(in memory\): (?:features file )?has no /(\w+) dataset", r"\1 has no '\2' key",
                     message)
    if len(named) == 1:
        message = re.sub(r"\b(?:on |at )?line (\d+)", lambda found: f"at {named[0]}[{int(found.group(1)) - 1}]",
                         message)
    return message


WRITERS = {"records": _write, "document": _write, "features": _write_features, "embeddings": _write_embeddings}


@contextmanager
def spooled(values: Mapping[str, object], features_in_memory: bool = False) -> Iterator[dict[str, object]]:
    """`values` (argument name -> a file path, or data in memory, see `held`) with each in-memory one written to
    a temporary file of its kind in its place, removed when the block ends; an error raised in the block (or
    about the data, while it is written) names the arguments instead of the temporary files.

    `features_in_memory`: features are not written but given as `FeaturesInMemory`, checked and cast as their file
    would be, for a block whose every read of them goes through `FeaturesReader` (match, encode): a notebook's
    arrays make no round trip through the disk (benchmarks/in_memory.py)."""
    if not any(held(value) for value in values.values()):
        yield dict(values)
        return
    with scratch_folder() as folder:
        files = {}
        try:
            given = dict(values)
            for name, value in values.items():
                kind = held(value)
                if kind == "features" and features_in_memory:
                    given[name] = _held_features(value, name)
                elif kind is not None:
                    files[name] = folder / f"{name}.{SUFFIXES[kind]}"
                    WRITERS[kind](files[name], value, name)
                    given[name] = os.fspath(files[name])
            yield given
        except ArgumentError:
            raise
        except VLToolsError as exc:
            raise VLToolsError(_named(str(exc), files)) from None

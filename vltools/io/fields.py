"""Typed fields of vltools files: every attribute of an HDF5 file and every field of a checkpoint a stage uses is
read through `field`, which checks its type where it is read and refuses a wrong one (or a missing one) in one line
naming the file and the field, so that a hand-edited or hostile file is never a traceback (`int('32x')`, `len(5)`).
Each reader says only which field, which kind and what to do; the message is made here, the same for all."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from vltools.errors import VLToolsError
from vltools.errors import shown as quoted


@dataclass(frozen=True)
class Kind:
    """What a field must be: `name` for the message ("an integer"), `accepts` the test, `convert` the plain Python
    value returned (h5py gives numpy scalars and bytes)."""

    name: str
    accepts: Callable[[object], bool]
    convert: Callable[[object], object] = lambda value: value


def _is_integer(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_text(value: object) -> bool:
    if isinstance(value, bytes):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True
    return isinstance(value, str)


INTEGER = Kind("an integer", _is_integer, int)
NUMBER = Kind("a number", lambda value: _is_integer(value) or isinstance(value, (float, np.floating)), float)
TEXT = Kind("a string", _is_text, lambda value: value.decode("utf-8") if isinstance(value, bytes) else str(value))
MAPPING = Kind("a mapping", lambda value: isinstance(value, dict))
LIST = Kind("a list", lambda value: isinstance(value, (list, tuple)), list)
TEXTS = Kind("a list of strings", lambda value: isinstance(value, (list, tuple)) and all(isinstance(item, str)
                                                                                         for item in value), list)


def optional(kind: Kind) -> Kind:
    """`kind`, or None (a field stored as None: a checkpoint's vocabulary of a model without one)."""
    return Kind(f"{kind.name} or None", lambda value: value is None or kind.accepts(value),
                lambda value: None if value is None else kind.convert(value))


def shown(value: object) -> str:
    """A field's value for a message, on one line and short (`vltools.errors.shown`), with its type: `'32x' (str)`,
    `None`, `[1, 2] (list)`."""
    return "None" if value is None else f"{quoted(value)} ({type(value).__name__})"


REQUIRED = object()    # `field`'s default: the field must be there


def field(values: Mapping[str, object], key: str, kind: Kind, source: object, fix: str, *,
          default: object = REQUIRED, what: str = "field") -> object:
    """`values[key]` (a dotted key walks nested mappings: "train_state.config.task") as `kind` converts it; a value
    of another kind, an intermediate that is no mapping, or (without `default`) a missing field is one line naming
    `source` (the file), the `what` ("field", "attribute") and `fix` (what to do). `default` is returned for a
    missing field (or a missing intermediate mapping), unchecked."""
    current: object = values
    parts = key.split(".")
    for depth, part in enumerate(parts):
        if depth and not isinstance(current, Mapping):
            raise VLToolsError(f"{source}: {what} {'.'.join(parts[:depth])!r} is {shown(current)}, not a mapping; "
                               f"{fix}")
        if part not in current:
            if default is REQUIRED:
                raise VLToolsError(f"{source}: lacks the {what} {key!r}; {fix}")
            return default
        current = current[part]
    if not kind.accepts(current):
        raise VLToolsError(f"{source}: {what} {key!r} is {shown(current)}, not {kind.name}; {fix}")
    return kind.convert(current)

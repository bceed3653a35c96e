"""The one kind of error a stage reports to the user: one line, exit status 1, no traceback."""

from __future__ import annotations

import math
import numbers
import os
import reprlib
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path


class VLToolsError(Exception):
    """A user-facing problem: bad input, missing file, offline download. Printed as one line."""


def python_spelling(name: str, value: str | None = None) -> str:
    """Argument `name` as a Python caller writes it: `top_k`, or with a value `model=CHECKPOINT`."""
    return name if value is None else f"{name}={value}"


# how messages spell an argument: as Python keywords, unless the command line runs (vltools.cli sets its own)
SPELLING: ContextVar[Callable[[str, str | None], str]] = ContextVar("spelling", default=python_spelling)


def argument(name: str, value: str | None = None) -> str:
    """Argument `name` (its Python name) as the user wrote it, for messages: `top_k` / `model=CHECKPOINT` from the
    Python API, `--top-k` / `--model CHECKPOINT` while a stage runs from the command line. The library raises
    with Python names; the command line maps them to its options in one place (vltools.cli)."""
    return SPELLING.get()(name, value)


class ArgumentError(VLToolsError):
    """A bad value of one argument (a usage error: exit 2 on the command line): `name` is its Python name,
    `problem` what is wrong with the value, without the name (the command line's option types put the option's
    name in front themselves)."""

    def __init__(self, name: str, problem: str) -> None:
        self.name, self.problem = name, problem
        super().__init__(f"{argument(name)} {problem}")


class CombinationError(ArgumentError):
    """Arguments that cannot go together (a usage error, like ArgumentError): `problem` names them."""

    def __init__(self, problem: str) -> None:
        self.name, self.problem = None, problem
        VLToolsError.__init__(self, problem)


@contextmanager
def spelled(spelling: Callable[[str, str | None], str]) -> Iterator[None]:
    """Spell arguments with `spelling` in the messages raised inside the block."""
    token = SPELLING.set(spelling)
    try:
        yield
    finally:
        SPELLING.reset(token)


def input_error(path: object, where: str | None, problem: str, fix: str | None = None) -> VLToolsError:
    """Build the standard message: which file, which line or id, what is wrong, what to do."""
    location = f"{path}" if where is None else f"{path}: {where}"
    message = f"{location}: {problem}"
    if fix:
        message += f"; {fix}"
    return VLToolsError(message)


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (at most 160 characters), or its class name when it is empty."""
    lines = str(exc).strip().splitlines()
    return lines[0][:160] if lines else exc.__class__.__name__


SHOWN_CHARS = 60     # at most, of a value a message quotes


def short_repr() -> reprlib.Repr:
    """A repr that cuts a value short as it builds it (a 5,000-record list is never printed whole): two levels,
    the first two items of a container, 60 characters of a string or any other value, 40 digits."""
    short = reprlib.Repr()
    for limit in ("maxlevel", "maxlist", "maxtuple", "maxdict", "maxset", "maxfrozenset", "maxdeque", "maxarray"):
        setattr(short, limit, 2)
    short.maxstring = short.maxother = 60
    short.maxlong = 40
    return short


SHORT = short_repr()


def shown(value: object) -> str:
    """`value` as a message quotes it, short whatever its size (an argument may be a list of thousands of records
    given where a path was expected): its repr cut to a prefix (a string to its first and last characters, a
    container to its first items, with how many it holds; at most SHOWN_CHARS characters), or an integer's size
    when it has too many digits to print (Python refuses to print one of more than 4300 digits)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and abs(int(value)) > 10**30:
        return f"an integer of about {int(value).bit_length() * math.log10(2):.0f} digits"
    text = SHORT.repr(value)
    if len(text) > SHOWN_CHARS:
        text = f"{text[:SHOWN_CHARS - 3]}..."
    if isinstance(value, list | tuple | dict | set | frozenset) and len(value) > SHORT.maxlist:
        return f"a {type(value).__name__} of {len(value)} items, {text}"
    return text


def shown_ids(ids: list[str], limit: int = 5) -> str:
    """The first few ids of a list, quoted, with how many more there are (for error messages)."""
    more = f" and {len(ids) - limit} more" if len(ids) > limit else ""
    return ", ".join(repr(i) for i in ids[:limit]) + more


def require_file(path: str | os.PathLike, absent: str = "no such file", give: str = "a regular file") -> Path:
    """`path` as a Path when it is a regular file (or a link to one); otherwise the one-line error saying what it is
    (a folder, a named pipe, a device, a socket: reading one would hang or read nothing) or, when nothing is there,
    `absent`; `give`: what to give instead."""
    path = Path(path)
    if path.is_file():
        return path
    try:
        mode = path.stat().st_mode
    except OSError:
        raise VLToolsError(f"{path}: {absent}") from None
    kind = ("a folder" if stat.S_ISDIR(mode) else "a named pipe" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a special file")
    raise VLToolsError(f"{path}: is {kind}, not a file; give {give}")


KEPT = "vltools_kept"    # the attribute of an exception that says what the interrupted run kept for --resume


def keep_note(exc: BaseException, note: str, resumable: bool = True) -> None:
    """Record on `exc` (Ctrl-C, SIGTERM, a failure) what the run it stopped kept ("17 of 40 images kept in
    feats.h5.partial/"), and whether `--resume` can continue from it, for the command line's last line."""
    setattr(exc, KEPT, (note, resumable))


def kept_note(exc: BaseException) -> tuple[str, bool] | None:
    """What `keep_note` recorded on `exc` (the note, and whether --resume continues from it), else None."""
    return getattr(exc, KEPT, None)

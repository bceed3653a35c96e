"""The one kind of error a stage reports to the user: one line, exit status 1, no traceback."""

from __future__ import annotations

import os
import stat
from pathlib import Path


class VLToolsError(Exception):
    """A user-facing problem: bad input, missing file, offline download. Printed as one line."""


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

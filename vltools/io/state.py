"""vltools' own small JSON state files (the model store's index), read through one validated reader: a file that
is unreadable, not JSON or not of its layout is one line naming it, what is wrong and how to repair or remove it,
never a traceback."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from vltools.errors import VLToolsError
from vltools.io.bounded import parse_json


def read_state(path: str | os.PathLike, what: str, check: Callable[[object], str | None], repair: str) -> object:
    """The JSON document at `path` (`what` names it in errors, e.g. "the model store's index"), once `check` (what
    is wrong with the decoded document, or None) accepts it; every problem ends with `repair`."""
    path = Path(path)
    try:
        data = parse_json(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        problem: str | None = f"is not UTF-8 text ({exc.reason} at byte {exc.start})"
    except json.JSONDecodeError as exc:
        problem = f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    except OSError as exc:
        problem = f"cannot be read ({exc.strerror or exc})"
    else:
        problem = check(data)
    if problem is not None:
        raise VLToolsError(f"{path}: {what} {problem}; {repair}")
    return data

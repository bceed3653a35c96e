"""vltools' own small JSON state files (the model store's index, the `PATH.meta.json` provenance sidecars), read
through one validated reader: a file that is unreadable, not JSON or not of its layout is one line naming it,
what is wrong and how to repair or remove it, never a traceback.
"""

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


def sidecar_path(path: str | os.PathLike) -> Path:
    """Where the provenance of a JSONL output is kept: `PATH.meta.json`."""
    return Path(f"{path}.meta.json")


def _provenance_problem(data: object) -> str | None:
    return None if isinstance(data, dict) else f"must be a JSON object of provenance, found {type(data).__name__}"


def read_sidecar(path: str | os.PathLike) -> dict | None:
    """The provenance sidecar of `path` (`PATH.meta.json`), or None when there is none."""
    meta = sidecar_path(path)
    if not meta.exists():
        return None
    return read_state(meta, "the provenance sidecar", _provenance_problem,
                      f"delete it (it only records how {Path(path).name} was made) or rerun the stage that wrote it")

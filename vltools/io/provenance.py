"""What every output records about how it was made."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from vltools import __version__


def command_line() -> str:
    """The full command line of this process, shell-quoted; `python -m vltools` (and torchrun's `-m vltools`) is
    written `vltools`, as the installed command is."""
    program = sys.argv[0] if sys.argv else "vltools"
    if Path(program).name == "__main__.py" and Path(program).parent.name == "vltools":
        program = "vltools"
    argv = [os.path.basename(program), *sys.argv[1:]]
    return shlex.join(argv)


def provenance(**extra: object) -> dict[str, object]:
    """vltools version, command line, creation time, plus any stage-specific fields."""
    record: dict[str, object] = {
        "vltools_version": __version__,
        "command": command_line(),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    record.update(extra)
    return record


def ids_digest(ids: list[str]) -> str:
    """A short stable hash of an id list, to record which inputs an output came from."""
    digest = hashlib.sha256()
    for item in ids:
        digest.update(item.encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()[:16]


def input_digest(files: Sequence[str | os.PathLike], *values: object) -> str:
    """A short hash of one item's inputs: each file's path, size and modification time, and `values`
    (boxes, options). Resumable stages store it with each finished item, so that a resumed run recomputes
    (or refuses) items whose input changed since they were computed."""
    parts: list[object] = []
    for path in files:
        try:
            info = os.stat(path)
            parts.append([os.path.abspath(path), info.st_size, info.st_mtime_ns])
        except OSError:
            parts.append([os.path.abspath(path), None, None])
    parts.append([repr(value) for value in values])
    return hashlib.sha256(json.dumps(parts).encode("utf-8")).hexdigest()[:16]

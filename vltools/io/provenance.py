"""What every output records about how it was made."""

from __future__ import annotations

import datetime
import hashlib
import os
import shlex
import sys

from vltools import __version__


def command_line() -> str:
    """The full command line of this process, shell-quoted."""
    argv = [os.path.basename(sys.argv[0]) if sys.argv else "vltools", *sys.argv[1:]]
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

"""Private temporary folders (`vltools-PID-*` in the system's temporary folder): spools of standard output, HDF5
read from standard input, data given in memory. Removed when their block ends; a killed run's are removed by the
next run that makes one."""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from vltools.io.owners import alive

PREFIX = "vltools-"


def remove_stale_scratch() -> None:
    """Remove the scratch folders of processes that no longer run."""
    host = socket.gethostname()
    for folder in Path(tempfile.gettempdir()).glob(f"{PREFIX}*-*"):
        found = re.match(rf"{PREFIX}(\d+)-", folder.name)
        if found and folder.is_dir() and not alive({"pid": int(found.group(1)), "host": host}):
            shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def scratch_folder() -> Iterator[Path]:
    """A private temporary folder, removed when the block ends."""
    remove_stale_scratch()
    with tempfile.TemporaryDirectory(prefix=f"{PREFIX}{os.getpid()}-") as folder:
        yield Path(folder)

"""Atomic writes (temporary file, then rename) and HDF5 or text to standard output."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from vltools.errors import VLToolsError


def is_stdout(path: str | os.PathLike | None) -> bool:
    """`None` or `-` means standard output."""
    return path is None or str(path) == "-"


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it over `path` only if the block succeeds."""
    final = Path(path)
    if final.parent and not final.parent.exists():
        raise VLToolsError(f"{final}: the folder {final.parent} does not exist; create it first")
    tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def binary_output(path: str | os.PathLike | None, what: str = "HDF5") -> Iterator[Path]:
    """Yield a file path to write a binary file to; it lands atomically at `path` or on stdout.

    Standard output works for a redirected file and for a pipe: the file is spooled to a temporary
    file and copied out when complete. A terminal is refused, since binary data would garble it.
    """
    if not is_stdout(path):
        with atomic_path(path) as tmp:
            yield tmp
        return
    if sys.stdout.isatty():
        raise VLToolsError(f"refusing to write {what} to a terminal; give -o PATH or redirect standard output")
    with tempfile.TemporaryDirectory(prefix="vltools-") as folder:
        spool = Path(folder) / "out"
        yield spool
        sys.stdout.flush()
        with open(spool, "rb") as src:
            shutil.copyfileobj(src, sys.stdout.buffer, length=1 << 20)
        sys.stdout.buffer.flush()


@contextlib.contextmanager
def text_output(path: str | os.PathLike | None) -> Iterator:
    """Yield a text stream that lands atomically at `path`, or standard output for `None` / `-`."""
    if is_stdout(path):
        yield sys.stdout
        sys.stdout.flush()
        return
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="\n") as stream:
        yield stream

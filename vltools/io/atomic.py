"""Atomic writes (temporary file, then rename) and HDF5 or text to standard output."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
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


@contextlib.contextmanager
def atomic_folder(out: str | os.PathLike, force: bool, replaceable: Callable[[Path], bool], what: str,
                  mark: str) -> Iterator[Path]:
    """Yield a hidden staging folder beside `out`; when the block succeeds it is renamed to `out`, so `out` is
    never half written. A non-empty `out` is refused unless `force` and `replaceable(out)` says it holds an
    earlier `what` (`mark` names how that is recognised, for the error)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise VLToolsError(f"{out}: exists and is not a folder; give a new folder name")
    replacing = out.exists() and any(out.iterdir())
    if replacing and not force:
        raise VLToolsError(f"{out}: folder exists and is not empty; give a new folder, or --force to replace an "
                           f"earlier {what}")
    if replacing and not replaceable(out):
        raise VLToolsError(f"{out}: --force replaces only an earlier {what} ({mark}), and this folder holds other "
                           "files; remove it yourself or choose another")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.tmp-{os.getpid()}"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    try:
        yield staging
        if replacing:
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            os.replace(out, old)
            os.replace(staging, out)
            shutil.rmtree(old)
        else:
            if out.exists():
                out.rmdir()
            os.replace(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)

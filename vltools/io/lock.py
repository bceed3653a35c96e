"""One writer per output: while a stage writes OUT it holds `OUT.lock` (pid, host, command), taken once by the
stage's entry for its whole run, before any work, so that a second process that wants to write OUT stops at once
with one line naming the first. What belongs to OUT (its temporaries, `OUT.partial/`, `OUT.last.pt`) is covered by
the same lock. A lock left by a dead process is removed."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from vltools.distributed import place
from vltools.errors import VLToolsError
from vltools.io.output import check_parent, is_device, is_stdout
from vltools.io.owners import alive, is_this_process, this_process
from vltools.io.write_errors import output_error

SUFFIX = ".lock"
# errors of os.link on file systems without hard links
NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK, errno.ENOSYS}
FRESH_SECONDS = 10.0  # an empty lock file younger than this is being written, not abandoned


def lock_path(path: str | os.PathLike) -> Path:
    """The lock file of output `path`."""
    final = Path(os.path.abspath(path))
    return final.with_name(final.name + SUFFIX)


def _read_owner(lock: Path) -> dict | None:
    """The lock file's content, {} when unreadable (a writer killed while creating it), None when gone."""
    try:
        owner = json.loads(lock.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


def _create(tmp: Path, lock: Path, content: dict) -> None:
    """Make `lock` hold `content` atomically: hard-link the complete `tmp` to it (FileExistsError when it is
    there); where the file system has no hard links, create it exclusively, then write it."""
    try:
        os.link(tmp, lock)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in NO_LINKS:
            raise
        descriptor = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(descriptor, json.dumps(content).encode("utf-8"))
        finally:
            os.close(descriptor)


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return 0.0


def _refuse_held(path: str | os.PathLike, lock: Path, owner: dict) -> None:
    """Stop: `owner`, a live process (this one, when one run names the same output twice), writes `path`."""
    if is_this_process(owner):
        raise VLToolsError(f"{path}: this run writes it twice (named as two outputs); give each output its own path")
    raise VLToolsError(f"{path}: another process is writing it (pid {owner.get('pid')} on {owner.get('host')}: "
                       f"{owner.get('command', '?')}); wait for it to end, or remove {lock} if it is gone")


def _acquire(path: str | os.PathLike) -> Path:
    """Create `PATH.lock` for this process, removing a stale one; a live holder is a one-line error."""
    check_parent(path)
    lock = lock_path(path)
    me = {**this_process(), "command": " ".join(["vltools", *sys.argv[1:]])[:300]}
    tmp = lock.with_name(f"{lock.name}.{os.getpid()}.tmp")
    try:
        descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(descriptor, json.dumps(me).encode("utf-8"))
        finally:
            os.close(descriptor)
        for _ in range(5):
            try:
                _create(tmp, lock, me)
                return lock
            except FileExistsError:
                owner = _read_owner(lock)
                if owner is None or (not owner and _age(lock) < FRESH_SECONDS):
                    continue  # gone meanwhile, or being written by its creator (no hard links)
                if owner and alive(owner):
                    _refuse_held(path, lock, owner)
                if _read_owner(lock) == owner:
                    with contextlib.suppress(FileNotFoundError):
                        lock.unlink()
        raise VLToolsError(f"{path}: could not take the lock {lock}; retry, or remove it if no vltools process runs")
    except OSError as exc:
        raise output_error(path, exc) from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _release(lock: Path) -> None:
    owner = _read_owner(lock)
    if owner and is_this_process(owner):
        with contextlib.suppress(OSError):
            lock.unlink()


@contextlib.contextmanager
def output_lock(*paths: str | os.PathLike | None, own: bool = False) -> Iterator[None]:
    """Hold the lock of each output of `paths` while the block runs; take it once, at a stage's entry.

    Standard output (`None` / `-`) and devices need no lock, nor do the other processes of a torchrun job (RANK > 0),
    which leave writing to the first, unless each writes its `own` outputs (its part of a set, vltools.io.shards).
    A path named twice is refused."""
    with contextlib.ExitStack() as stack:
        if own or place().main:
            for path in paths:
                if not is_stdout(path) and not is_device(path):
                    stack.callback(_release, _acquire(path))
        yield

"""Safe output: one writer per output (a lock file beside it), atomic writes (temporary file, then rename),
HDF5 or text to standard output, and one-line errors for any failure to write (read-only folder, disk full).

Rules every stage inherits by writing through these helpers (README, Conventions):

- the folder that holds an output must exist; no stage creates it (`check_parent`);
- while a process writes PATH it holds `PATH.lock` (pid, host, command); a second process that wants to
  write PATH stops with one line naming the first (`output_lock`); a lock left by a dead process is removed;
- temporary files of a killed writer (`PATH.tmp-PID`, spool folders `vltools-PID-*` in the temporary
  folder) are removed by the next run that writes the same output (or any output to standard output).
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re
import resource
import shutil
import signal
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from vltools.distributed import place
from vltools.errors import VLToolsError, argument, first_line

LOCK_SUFFIX = ".lock"
SPOOL_PREFIX = "vltools-"
# errors that are about the output whichever file operation raised them
OUTPUT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}
# errors of os.link on file systems without hard links
NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK, errno.ENOSYS}
FRESH_SECONDS = 10.0  # an empty lock file younger than this is being written, not abandoned
# how many times this process holds each lock (locks are re-entrant within a process)
_held: dict[Path, int] = {}


def is_stdout(path: str | os.PathLike | None) -> bool:
    """`None` or `-` means standard output."""
    return path is None or str(path) == "-"


def output_name(path: str | os.PathLike | None) -> str:
    """What the user calls output `path` in messages: the path they gave, or "standard output" for `None` / `-`."""
    return "standard output" if is_stdout(path) else str(path)


def is_device(path: str | os.PathLike) -> bool:
    """Whether `path` is an existing device, pipe or socket (`-o /dev/null`, a named pipe): written in place."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def check_parent(path: str | os.PathLike) -> None:
    """Refuse an output whose folder does not exist (the one rule: stages never create the output's folder)."""
    parent = Path(os.path.abspath(path)).parent
    if not parent.is_dir():
        raise VLToolsError(f"{path}: the folder {parent} does not exist; create it first")


# what to do about a write error, by errno (else: WRITE_FIX)
WRITE_FIXES = {errno.EFBIG: "raise the file size limit (ulimit -f) or write it elsewhere",
               errno.EIO: "the disk failed to write: check it, or write it elsewhere"}
WRITE_FIX = "check that its folder is writable and has free space"


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) and SIGTERM while the block writes, then act on them: a write they would cut in half
    (an HDF5 part whose datasets and ids disagree) is finished first. Python handles signals in the main thread
    only; in another thread the block runs as it is."""
    pending: list[int] = []
    try:
        previous = {number: signal.signal(number, lambda got, _: pending.append(got))
                    for number in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:     # not the main thread
        yield
        return
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if pending:
            signal.raise_signal(pending[0])


def output_error(path: str | os.PathLike, exc: OSError, note: str = "") -> VLToolsError:
    """The one-line error for an OSError met while writing `path` (permissions, read-only or full disk, over
    the file size limit, a failing disk), saying what to do; `note` says what was kept, if anything."""
    reason = exc.strerror or _h5_reason(str(exc)) or first_line(exc)
    kept = f"; {note}" if note else ""
    return VLToolsError(f"{path}: cannot write ({reason}){kept}; {WRITE_FIXES.get(exc.errno, WRITE_FIX)}")


def check_room(path: str | os.PathLike, size: int) -> None:
    """Raise OSError (EFBIG or ENOSPC, naming `path`) when `size` more bytes cannot be added to file `path`: over
    the file size limit (`ulimit -f`) or more than its file system has free. Called before a write whose size is
    known, so that it is refused before any of it is written; `size` must not count more than the write adds."""
    try:
        current = os.stat(path).st_size
    except FileNotFoundError:
        current = 0
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY and current + size > limit:
        raise OSError(errno.EFBIG, f"{os.strerror(errno.EFBIG)}: {current + size} bytes, over the limit of "
                                   f"{limit} (ulimit -f)", str(path))
    folder = os.statvfs(Path(os.path.abspath(path)).parent)
    free = (folder.f_bfree if os.geteuid() == 0 else folder.f_bavail) * folder.f_frsize
    if size > free:
        raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)}: {size} bytes to write, {free} free",
                      str(path))


class DeferredWrites(io.RawIOBase):
    """File `path` open for reading and writing (created; emptied when `truncate`) whose writes never fail: the
    first OSError of a write (full disk, over the file size limit, a failing device) is kept in `error`, and
    what could not be written from then on is kept in memory and read back from there.

    For libraries that cannot survive a failed write: HDF5 crashes the process (segmentation fault) closing a
    file after one, and torch.save reports it as an iostream error without its cause. They see a working file to
    the end; their caller then raises `error` (`check`) and removes the file."""

    def __init__(self, path: str | os.PathLike, truncate: bool) -> None:
        super().__init__()
        self.path = str(path)
        self.error: OSError | None = None
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | (os.O_TRUNC if truncate else 0), 0o644)
        self._position = 0
        self._size = os.fstat(self._fd).st_size
        self._unwritten: list[tuple[int, bytes]] = []   # (offset, bytes) not on disk, in the order written

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self._size}[whence]
        self._position = base + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer: memoryview) -> int:
        view = memoryview(buffer).cast("B")
        count = os.preadv(self._fd, [view], self._position)
        end = self._position + len(view)
        for offset, data in self._unwritten:
            low, high = max(offset, self._position), min(offset + len(data), end)
            if low < high:
                view[count:] = bytes(len(view) - count)    # the file's end: the gap before unwritten bytes
                view[low - self._position:high - self._position] = data[low - offset:high - offset]
                count = max(count, high - self._position)
        self._position += count
        return count

    def write(self, data: bytes) -> int:
        view = memoryview(data).cast("B")
        size = len(view)
        offset = self._position
        while self.error is None and len(view):
            try:
                written = os.pwrite(self._fd, view, offset)
            except OSError as exc:
                exc.filename = self.path
                self.error = exc
                break
            view, offset = view[written:], offset + written
        if len(view):
            self._unwritten.append((offset, bytes(view)))
        self._position += size
        self._size = max(self._size, self._position)
        return size

    def truncate(self, size: int | None = None) -> int:
        size = self._position if size is None else size
        if self.error is None:
            try:
                os.ftruncate(self._fd, size)
            except OSError as exc:
                exc.filename = self.path
                self.error = exc
        self._size = size
        return size

    def flush(self) -> None:
        """Nothing is buffered: every write went to the file, or failed."""

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
            self._unwritten.clear()
        super().close()

    def check(self) -> None:
        """Raise the first write error (an OSError naming the file), if any."""
        if self.error is not None:
            raise self.error


def _h5_reason(message: str) -> str | None:
    """The system's reason inside an h5py error message (`error message = 'No space left on device'`)."""
    found = re.search(r"error message = '([^']*)'", message)
    return found.group(1) if found else None


def _about(exc: OSError, *paths: Path) -> bool:
    """Whether `exc` concerns one of `paths` (or is a failure of any write, such as a full disk)."""
    if exc.errno in OUTPUT_ERRNOS:
        return True
    names = {str(p) for p in paths}
    if exc.filename is not None:
        return str(exc.filename) in names
    message = str(exc)
    return any(name in message for name in names) or re.search(r"errno = (28|30|122|27)\b", message) is not None


def _lock_path(path: str | os.PathLike) -> Path:
    final = Path(os.path.abspath(path))
    return final.with_name(final.name + LOCK_SUFFIX)


def _start_time(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, Linux), to tell a reused pid from the locker."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(owner: dict) -> bool:
    """Whether the process that wrote lock content `owner` still runs (other hosts: assume it does)."""
    if owner.get("host") != socket.gethostname():
        return True
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    started = owner.get("started")
    return started is None or _start_time(pid) in (None, started)


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


def _acquire(path: str | os.PathLike) -> Path:
    """Create `PATH.lock` for this process, removing a stale one; a live other holder is a one-line error."""
    check_parent(path)
    lock = _lock_path(path)
    me = {"pid": os.getpid(), "host": socket.gethostname(), "started": _start_time(os.getpid()),
          "command": " ".join(["vltools", *sys.argv[1:]])[:300]}
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
                if owner and _alive(owner):
                    raise VLToolsError(
                        f"{path}: another process is writing it (pid {owner.get('pid')} on {owner.get('host')}: "
                        f"{owner.get('command', '?')}); wait for it to end, or remove {lock} if it is gone"
                    ) from None
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
    if owner and owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname():
        with contextlib.suppress(OSError):
            lock.unlink()


@contextlib.contextmanager
def output_lock(path: str | os.PathLike | None) -> Iterator[None]:
    """Hold `PATH.lock` while the block runs, so that no other process writes PATH meanwhile.

    Re-entrant within a process (a stage may hold it for its whole run while its writers take it again).
    Standard output (`None` / `-`) needs no lock, nor do the other processes of a torchrun job (RANK > 0),
    which leave writing to the first. Take it before long work, so that a clash is reported at once.
    """
    if is_stdout(path) or is_device(path) or not place().main:
        yield
        return
    lock = _lock_path(path)
    if not _held.get(lock):
        _acquire(path)
    _held[lock] = _held.get(lock, 0) + 1
    try:
        yield
    finally:
        _held[lock] -= 1
        if not _held[lock]:
            del _held[lock]
            _release(lock)


def _remove_stale_temporaries(final: Path) -> None:
    """Remove `FINAL.tmp-*` files of earlier writers (the caller holds the lock, so they are all dead)."""
    for stale in final.parent.glob(f"{glob_escape(final.name)}.tmp-*"):
        if stale.name != f"{final.name}.tmp-{os.getpid()}":
            with contextlib.suppress(OSError):
                if stale.is_dir():
                    shutil.rmtree(stale)
                else:
                    stale.unlink()


def glob_escape(name: str) -> str:
    """`name` with glob metacharacters escaped."""
    return re.sub(r"([*?\[])", r"[\1]", name)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it over `path` only if the block succeeds.

    Holds the output lock meanwhile, removes temporaries of killed earlier writers, and turns an OSError
    about the output (no permission, read-only or full disk) into a one-line error naming `path`.
    """
    final = Path(path)
    if is_device(final):  # never replace /dev/null or a named pipe by a file: write through a spool to it
        with spool_folder() as folder:
            yield folder / "out"
            try:
                with open(folder / "out", "rb") as src, open(final, "wb") as dst:
                    shutil.copyfileobj(src, dst, length=1 << 20)
            except OSError as exc:
                raise output_error(final, exc) from exc
        return
    with output_lock(final):
        _remove_stale_temporaries(final)
        tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
        try:
            yield tmp
            os.replace(tmp, final)
        except OSError as exc:
            if _about(exc, tmp, final):
                raise output_error(final, exc) from exc
            raise
        finally:
            with contextlib.suppress(OSError):
                if tmp.is_dir():
                    shutil.rmtree(tmp)
                elif tmp.exists():
                    tmp.unlink()


def remove_stale_spools() -> None:
    """Remove spool folders (`vltools-PID-*` in the temporary folder) of processes that no longer run."""
    host = socket.gethostname()
    for folder in Path(tempfile.gettempdir()).glob(f"{SPOOL_PREFIX}*-*"):
        found = re.match(rf"{SPOOL_PREFIX}(\d+)-", folder.name)
        if found and folder.is_dir() and not _alive({"pid": int(found.group(1)), "host": host}):
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def spool_folder() -> Iterator[Path]:
    """A private temporary folder, removed on exit; a killed run's folder is removed by the next run."""
    remove_stale_spools()
    with tempfile.TemporaryDirectory(prefix=f"{SPOOL_PREFIX}{os.getpid()}-") as folder:
        yield Path(folder)


def refuse_terminal(what: str) -> None:
    """Refuse binary data (`what`, e.g. HDF5) for standard output when it is a terminal, which it would garble.

    The CLI calls it when a stage starts, before any work (vltools.cli); `binary_output` calls it again for
    library callers."""
    if sys.stdout.isatty():
        raise VLToolsError(f"refusing to write {what} to a terminal; give -o PATH or redirect standard output")


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
    refuse_terminal(what)
    with spool_folder() as folder:
        spool = folder / "out"
        try:
            yield spool
        except OSError as exc:
            if _about(exc, spool):
                raise output_error(f"{spool} (spool of standard output)", exc) from exc
            raise
        sys.stdout.flush()
        with open(spool, "rb") as src:
            shutil.copyfileobj(src, sys.stdout.buffer, length=1 << 20)
        sys.stdout.buffer.flush()


def _stdout_file() -> os.stat_result | None:
    """The status of standard output when it is a regular file (`> out.h5`), else None."""
    try:
        if sys.stdout.fileno() != 1:
            return None
        info = os.fstat(1)
    except (AttributeError, OSError, ValueError):
        return None
    return info if stat.S_ISREG(info.st_mode) else None


def _process_start() -> float | None:
    """When this process started (seconds since the epoch, to about a second; Linux), else None."""
    try:
        ticks = _start_time(os.getpid())
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + int(ticks) / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, TypeError, ValueError):
        return None


def empty_stdout_file() -> tuple[int, int] | None:
    """(device, inode) of standard output when it is an empty regular file at the start of a run (the shell's
    `> out.h5`), to be passed to `after_failure`; else None."""
    info = _stdout_file()
    return (info.st_dev, info.st_ino) if info is not None and info.st_size == 0 else None


def _stderr_is(key: tuple[int, int]) -> bool:
    """Whether standard error goes to the file (device, inode) `key` (the shell's `> log 2>&1`)."""
    try:
        errors = os.fstat(2)
    except OSError:
        return False
    return (errors.st_dev, errors.st_ino) == key


def after_failure(empty: tuple[int, int] | None) -> str:
    """What a failed run did about the empty file standard output was redirected to (`empty` from
    `empty_stdout_file`), as words to append to its error line ("" when there is none).

    Call it only for a run whose primary output was standard output (no -o, or -o -): any other file standard
    output went to is a log the user keeps. A redirected file is created by the shell, not by vltools, so a
    failed run would leave it empty, and make would take it for up to date. It is removed when this run can tell
    it is the file the shell made for it: still empty, still the same file under its name, not where standard
    error goes, and created or truncated when this process started (within 2 s); otherwise it is kept and the
    error says so."""
    info = _stdout_file()
    if empty is None or info is None or (info.st_dev, info.st_ino) != empty or info.st_size or _stderr_is(empty):
        return ""
    try:
        name = os.readlink("/proc/self/fd/1")
        same = os.stat(name)
    except OSError:  # no /proc, or a file with no name (deleted): nothing a user would find
        return ""
    started = _process_start()
    if (same.st_dev, same.st_ino) != empty or started is None or same.st_mtime < started - 2.0:
        return f"; {name} (standard output) was left empty"
    with contextlib.suppress(OSError):
        os.unlink(name)
        return f"; removed the empty {name} that standard output was redirected to"
    return f"; {name} (standard output) was left empty"


@contextlib.contextmanager
def text_output(path: str | os.PathLike | None) -> Iterator:
    """Yield a text stream that lands atomically at `path`, or standard output for `None` / `-`."""
    if is_stdout(path):
        yield sys.stdout
        sys.stdout.flush()
        return
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="\n") as stream:
        yield stream


def write_json(path: str | os.PathLike | None, document: object) -> None:
    """Write one JSON document (UTF-8, a final newline) atomically to `path`, or to standard output."""
    with text_output(path) as stream:
        json.dump(document, stream, ensure_ascii=False)
        stream.write("\n")


@contextlib.contextmanager
def atomic_folder(out: str | os.PathLike, force: bool, replaceable: Callable[[Path], bool], what: str,
                  mark: str) -> Iterator[Path]:
    """Yield a hidden staging folder beside `out`; when the block succeeds it is renamed to `out`, so `out` is
    never half written. A non-empty `out` is refused unless `force` and `replaceable(out)` says it holds an
    earlier `what` (`mark` names how that is recognised, for the error). Holds the output lock of `out`
    meanwhile and removes the staging folders of killed earlier runs, as `atomic_path` does for files."""
    out = Path(out)
    if out.is_symlink():    # replacing it would replace the link, then fail to remove the folder behind it
        raise VLToolsError(f"{out}: is a symbolic link (to {os.readlink(out)}); give the folder itself or a new "
                           "folder name")
    if out.exists() and not out.is_dir():
        raise VLToolsError(f"{out}: exists and is not a folder; give a new folder name")
    replacing = out.exists() and any(out.iterdir())
    if replacing and not force:
        raise VLToolsError(f"{out}: folder exists and is not empty; give a new folder, or {argument('force', 'True')} "
                           f"to replace an earlier {what}")
    if replacing and not replaceable(out):
        raise VLToolsError(f"{out}: {argument('force')} replaces only an earlier {what} ({mark}), and this folder "
                           "holds other files; remove it yourself or choose another")
    check_parent(out)
    with output_lock(out):
        for stale in out.parent.glob(f".{glob_escape(out.name)}.tmp-*"):  # of killed runs: the lock is ours
            shutil.rmtree(stale, ignore_errors=True)
        staging = out.parent / f".{out.name}.tmp-{os.getpid()}"
        try:
            staging.mkdir()
        except OSError as exc:
            raise output_error(out, exc) from exc
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
        except OSError as exc:
            if _about(exc, staging, out):
                raise output_error(out, exc) from exc
            raise
        finally:
            if staging.exists():
                shutil.rmtree(staging)

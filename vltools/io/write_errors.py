"""Failures to write an output, each one line saying what to do: permissions, a read-only or full disk, the file
size limit (`ulimit -f`), a failing disk; room checked before a write of known size; and a file whose writes never
fail, for libraries (HDF5, torch.save) that cannot survive a failed write."""

from __future__ import annotations

import errno
import io
import os
import re
import resource
from pathlib import Path

from vltools.errors import VLToolsError, first_line

# errors that are about the output whichever file operation raised them
OUTPUT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}

# what to do about a write error, by errno (else: WRITE_FIX)
WRITE_FIXES = {errno.EFBIG: "raise the file size limit (ulimit -f) or write it elsewhere",
               errno.EIO: "the disk failed to write: check it, or write it elsewhere"}
WRITE_FIX = "check that its folder is writable and has free space"


class OutputError(VLToolsError):
    """An output could not be written (the one line says why and what to do)."""


def output_error(path: str | os.PathLike, exc: OSError, note: str = "") -> OutputError:
    """The one-line error for an OSError met while writing `path` (permissions, read-only or full disk, over
    the file size limit, a failing disk), saying what to do; `note` says what was kept, if anything."""
    reason = exc.strerror or _h5_reason(str(exc)) or first_line(exc)
    kept = f"; {note}" if note else ""
    return OutputError(f"{path}: cannot write ({reason}){kept}; {WRITE_FIXES.get(exc.errno, WRITE_FIX)}")


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


def concerns_output(exc: OSError, *paths: Path) -> bool:
    """Whether `exc` concerns one of `paths` (or is a failure of any write, such as a full disk)."""
    if exc.errno in OUTPUT_ERRNOS:
        return True
    names = {str(p) for p in paths}
    if exc.filename is not None:
        return str(exc.filename) in names
    message = str(exc)
    return any(name in message for name in names) or re.search(r"errno = (28|30|122|27)\b", message) is not None

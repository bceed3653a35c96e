"""The one way an output is written: to a temporary beside its target (a file `OUT.tmp-PID`, a folder
`.OUT.tmp-PID`), or to a spool for standard output and devices; then `commit` puts it in place whole (a rename, or a
copy to standard output or the device) or `discard` drops it. A killed run leaves only its temporary, which the
next run writing the same output removes. Locking the output is its stage's job, once (vltools.io.lock).

Rules every stage inherits by writing through here: the folder that holds an output must exist (no stage creates
it); binary data is never written to a terminal; an OSError about the output is one line naming it
(vltools.io.write_errors)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from vltools.errors import VLToolsError, argument
from vltools.io.scratch import scratch_folder
from vltools.io.write_errors import concerns_output, output_error


def is_stdout(path: str | os.PathLike | None) -> bool:
    """`None` or `-` means standard output."""
    return path is None or str(path) == "-"


def output_name(path: str | os.PathLike | None) -> str:
    """What the user calls output `path` in messages: the path they gave, or "standard output" for `None` / `-`."""
    return "standard output" if is_stdout(path) else str(path)


def is_device(path: str | os.PathLike | None) -> bool:
    """Whether `path` is an existing device, pipe or socket (`-o /dev/null`, a named pipe): written in place."""
    if path is None:
        return False
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


def refuse_terminal(what: str) -> None:
    """Refuse binary data (`what`, e.g. HDF5) for standard output when it is a terminal, which it would garble."""
    if sys.stdout.isatty():
        raise VLToolsError(f"refusing to write {what} to a terminal; give -o PATH or redirect standard output")


def glob_escape(name: str) -> str:
    """`name` with glob metacharacters escaped."""
    return re.sub(r"([*?\[])", r"[\1]", name)


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


class Output:
    """One output being written at `path`: `commit()` puts it at its target whole, `discard()` drops it.

    The target is a file (`path` is `FILE.tmp-PID` beside it), a folder (`folder=True`: `.FOLDER.tmp-PID`, which
    replaces an earlier folder there when committed), standard output (`target` None or `-`: a spool copied out
    when committed) or a device or pipe (a spool copied into it). Temporaries of killed earlier writers of the same
    target are removed when it is opened."""

    def __init__(self, target: str | os.PathLike | None, folder: bool = False) -> None:
        self.target = None if is_stdout(target) else Path(target)
        self.name = output_name(target)
        self._spool: contextlib.ExitStack | None = None
        if self.target is None or is_device(self.target):
            self._spool = contextlib.ExitStack()
            self.path = self._spool.enter_context(scratch_folder()) / "out"
        else:
            check_parent(self.target)
            hidden = "." if folder else ""
            pattern = f"{hidden}{glob_escape(self.target.name)}.tmp-*"
            self.path = self.target.with_name(f"{hidden}{self.target.name}.tmp-{os.getpid()}")
            for stale in self.target.parent.glob(pattern):   # of killed runs: this run owns the output
                if stale != self.path:
                    _remove(stale)
        if folder:
            try:
                self.path.mkdir()
            except OSError as exc:
                self.discard()
                raise output_error(self.name, exc) from exc

    def commit(self) -> None:
        """Put what was written at `path` in place: rename it over the target, or copy it out of its spool."""
        try:
            if self._spool is None:
                self._replace()
            elif self.target is None:
                sys.stdout.flush()
                with open(self.path, "rb") as source:
                    shutil.copyfileobj(source, sys.stdout.buffer, length=1 << 20)
                sys.stdout.buffer.flush()
            else:
                with open(self.path, "rb") as source, open(self.target, "wb") as device:
                    shutil.copyfileobj(source, device, length=1 << 20)
        except OSError as exc:
            if self.target is not None and concerns_output(exc, self.path, self.target):
                raise output_error(self.name, exc) from exc
            raise
        finally:
            self.discard()

    def _replace(self) -> None:
        """Rename `path` over the target; a folder replaces an earlier folder (moved aside, then removed)."""
        if not self.path.is_dir() or not self.target.exists():
            os.replace(self.path, self.target)
            return
        if not any(self.target.iterdir()):
            self.target.rmdir()
            os.replace(self.path, self.target)
            return
        old = self.target.with_name(f".{self.target.name}.old-{os.getpid()}")
        os.replace(self.target, old)
        os.replace(self.path, self.target)
        shutil.rmtree(old)

    def discard(self) -> None:
        """Drop what was written (nothing once committed)."""
        if self._spool is not None:
            self._spool.close()
        else:
            _remove(self.path)


@contextlib.contextmanager
def written(target: str | os.PathLike | None, folder: bool = False, what: str = "HDF5") -> Iterator[Path]:
    """Yield the path to write output `target` at (see `Output`); commit it when the block succeeds, else discard
    it. Binary data (`what`) for standard output is refused when that is a terminal. An OSError about the output
    (no permission, read-only or full disk) is one line naming it."""
    if is_stdout(target):
        refuse_terminal(what)
    output = Output(target, folder)
    try:
        yield output.path
    except OSError as exc:
        output.discard()
        if concerns_output(exc, output.path, *([output.target] if output.target else [])):
            raise output_error(output.name, exc) from exc
        raise
    except BaseException:
        output.discard()
        raise
    output.commit()


@contextlib.contextmanager
def text_output(target: str | os.PathLike | None) -> Iterator[IO[str]]:
    """Yield a text stream that lands whole at `target`, or standard output itself for `None` / `-` (text is
    streamed there as it comes)."""
    if is_stdout(target):
        yield sys.stdout
        sys.stdout.flush()
        return
    with written(target) as path, open(path, "w", encoding="utf-8", newline="\n") as stream:
        yield stream


def write_json(target: str | os.PathLike | None, document: object) -> None:
    """Write one JSON document (UTF-8, a final newline) whole to `target`, or to standard output."""
    with text_output(target) as stream:
        json.dump(document, stream, ensure_ascii=False)
        stream.write("\n")


def check_folder_target(out: Path, force: bool, replaceable: Callable[[Path], bool], what: str, mark: str) -> None:
    """Refuse folder `out` as an output unless it is new or empty, or `force` and `replaceable(out)` says it holds
    an earlier `what` (`mark` names how that is recognised, for the error)."""
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


@contextlib.contextmanager
def written_folder(out: str | os.PathLike, force: bool, replaceable: Callable[[Path], bool], what: str,
                   mark: str) -> Iterator[Path]:
    """Yield a hidden staging folder that becomes folder `out` whole when the block succeeds (`check_folder_target`
    says which `out` may be replaced)."""
    out = Path(out)
    check_folder_target(out, force, replaceable, what, mark)
    with written(out, folder=True) as staging:
        yield staging

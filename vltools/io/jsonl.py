"""JSON lines, read and written through the jsonlines package: the one place vltools turns a JSONL file into
values and values into JSONL lines (records, resumable partial files, in-memory records spooled for the API,
training logs, per-item scores).

Reading keeps vltools's bounds (io/bounded.py): jsonlines is given the lines of `text_lines` (a line over the
cap, or not UTF-8, refused before it is held) and decodes each with `parse_json` (depth and digit limits), so a
malformed line is one error naming the file and the line.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, TextIO

import jsonlines

from vltools.errors import VLToolsError, input_error
from vltools.io.bounded import parse_json, text_lines
from vltools.io.kinds import kind_of, peek
from vltools.io.shards import is_part_set, part_files


@contextmanager
def _opened(path: str | os.PathLike, json_lines: bool = False) -> Iterator[tuple[BinaryIO, str | os.PathLike]]:
    """The binary stream of `path` (standard input for `-`) and the name errors give it; HDF5 is refused by name,
    and so, where `json_lines` are read, is a Flickr token file (its first line's JSON error would say nothing)."""
    if str(path) == "-":
        yield sys.stdin.buffer, "standard input"
        return
    if not Path(path).exists():
        raise VLToolsError(f"{path}: no such file")
    with open(path, "rb") as stream:
        kind = kind_of(peek(stream))
        if kind == "hdf5":     # its first bytes are not UTF-8: say what it is instead
            raise VLToolsError(f"{path}: HDF5, not JSON lines; give the JSON lines file here (see the stage's --help "
                               "for which input takes which file)")
        if json_lines and kind == "flickr":
            raise VLToolsError(f"{path}: a Flickr token file (IMAGE#N, a tab, a caption), not JSON lines; convert "
                               f"it first: vltools convert flickr {shlex.quote(str(path))} -o captions.jsonl")
        yield stream, path


def iter_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """(line number, text) of each non-blank line of a UTF-8 file, or of standard input for `-` (bounded.text_lines:
    a line too long or not UTF-8 is an error)."""
    with _opened(path) as (stream, name):
        yield from ((number, line) for number, line in text_lines(stream, name) if line.strip())


def json_problem(exc: json.JSONDecodeError) -> str:
    """`what at column N` for a JSON error (some of json's messages already end in "at")."""
    message = exc.msg[:-3] if exc.msg.endswith(" at") else exc.msg
    return f"{message} at column {exc.colno}"


class _Numbered:
    """The lines of a stream for jsonlines.Reader (bounded.text_lines), remembering the number of the last one
    given, which is the line of the value the reader returned."""

    def __init__(self, stream: BinaryIO, name: object, cut_ends: bool = False) -> None:
        self.lines, self.number = text_lines(stream, name, cut_ends), 0

    def __iter__(self) -> Iterator[str]:
        for number, text in self.lines:
            self.number = number
            yield text


def iter_json_lines(path: str | os.PathLike, fix: str | None) -> Iterator[tuple[int, object]]:
    """(line number, decoded value) of each non-blank line of a JSONL file (`-`: standard input), read by
    jsonlines.Reader with the bounded parser (whose every failure is a json.JSONDecodeError, the cause jsonlines
    gives); a `null` line is None. A malformed line is a one-line error naming
    the file and the line and ending with `fix`; with `fix` None it is skipped (the last line of a file whose
    writer was killed), and a line that is not UTF-8 text ends the reading (one cut inside a character). A folder
    of parts (vltools.io.shards) is read as the one file its parts make, in order (each error names its part)."""
    if is_part_set(path):
        for part in part_files(path):
            yield from iter_json_lines(part, fix)
        return
    with _opened(path, json_lines=True) as (stream, name):
        lines = _Numbered(stream, name, cut_ends=fix is None)
        reader = jsonlines.Reader(lines, loads=parse_json)
        while True:
            try:
                value = reader.read(allow_none=True, skip_empty=True)
            except EOFError:
                return
            except jsonlines.InvalidLineError as exc:
                if fix is None:
                    continue
                raise input_error(name, f"line {exc.lineno}", f"malformed JSON ({json_problem(exc.__cause__)})",
                                  fix) from None
            yield lines.number, value


def json_writer(stream: TextIO, dumps: Callable[[object], str] | None = None) -> jsonlines.Writer:
    """A jsonlines.Writer of one value a line to the open text `stream` (which stays open): UTF-8 as it is
    (not \\u-escaped), or what `dumps` makes of each value (training logs round their numbers)."""
    return jsonlines.Writer(stream) if dumps is None else jsonlines.Writer(stream, dumps=dumps)


def write_json_lines(stream: TextIO, values: Iterable[object], dumps: Callable[[object], str] | None = None) -> int:
    """Write each of `values` as one line of `stream` (json_writer); return how many."""
    writer = json_writer(stream, dumps)
    count = 0
    for value in values:
        writer.write(value)
        count += 1
    return count

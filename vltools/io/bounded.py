"""The readers that bound what an input's own bytes can make vltools allocate or recurse into: a line longer than
MAX_LINE_BYTES, JSON nested deeper than MAX_JSON_DEPTH, a tar member whose header claims more bytes than the
archive holds (or than its reader allows). Every JSONL line, JSON document and tar member vltools reads goes
through them, so that such an input is a one-line error naming the file, never a MemoryError or a RecursionError.

A whole file is read as it is: its size is what the disk holds, not a claim (the field's Visual Genome JSON files
are gigabytes).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sys
from collections.abc import Iterator
from typing import BinaryIO

from vltools.errors import input_error

MAX_LINE_BYTES = 64 << 20     # a JSONL record: captions are bytes, a rankings line of 10,000 results under 1 MiB
MAX_JSON_DEPTH = 100          # the field's files nest 2 to 6 deep; Python's parser and writers recurse per level

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_LONG_DIGITS = re.compile(r"[0-9]{309,}")     # an integer this long may be beyond a float's range (1.8e308)
_HIGH, _LOW = r"\\u[dD][89abAB][0-9a-fA-F]{2}", r"\\u[dD][c-fC-F][0-9a-fA-F]{2}"
_LONE_ESCAPE = re.compile(rf"{_HIGH}(?!{_LOW})|(?<!{_HIGH}){_LOW}")    # a surrogate escape not in a pair
_SURROGATE = re.compile("[\ud800-\udfff]")


def _too_deep(text: str) -> int | None:
    """The position of the first bracket of `text` nested deeper than MAX_JSON_DEPTH (brackets inside strings do
    not count), or None. A text with fewer opening brackets is not scanned; another is scanned at C speed (strings
    and other characters dropped), and only one found too deep again, for the position."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return None
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0) <= MAX_JSON_DEPTH:
        return None
    depth = 0
    for match in _TOKEN.finditer(text):
        depth += _STEP.get(match.group(), 0)
        if depth > MAX_JSON_DEPTH:
            break
    return match.start()


class _DuplicateKey(Exception):
    """A key found twice in one JSON object (`_unique`), raised to `parse_json`, which says where."""


def _unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """The object of `pairs`; a key given twice (which json would resolve silently to its last value) is refused."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        raise _DuplicateKey(next(key for key, _ in pairs if key in seen or seen.add(key)))
    return value


def _float_sized(digits: str) -> int:
    """The integer `digits` spell, refused (OverflowError) beyond the range of a float, which every number vltools
    reads is compared or computed as (a 4,000-digit box coordinate)."""
    value = int(digits)
    float(value)
    return value


def _has_surrogate(value: object) -> bool:
    """Whether a decoded JSON value holds a string (or key) with a lone surrogate."""
    if isinstance(value, str):
        return _SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(_has_surrogate(key) or _has_surrogate(item) for key, item in value.items())
    return isinstance(value, list) and any(map(_has_surrogate, value))


def _decoded(text: str) -> object:
    """`json.loads(text)` with duplicate keys refused and, where the text has so many digits in a row, integers
    beyond a float's range (`_float_sized`); the hook is given only then, as it slows every integer."""
    return json.loads(text, object_pairs_hook=_unique,
                      parse_int=_float_sized if _LONG_DIGITS.search(text) else None)


def parse_json(text: str) -> object:
    """`json.loads(text)`, where every way the text can fail is a json.JSONDecodeError (its message, line and column
    are what callers name): malformed, nested deeper than MAX_JSON_DEPTH (which Python's parser would meet as a
    RecursionError), a number of more digits than Python converts (a ValueError) or beyond a float's range, a key
    twice in one object, or a string with a lone surrogate (`\\ud800`: no UTF-8 writer can write it, so the stage
    that reads it would fail at its output or in a tokenizer)."""
    deep = _too_deep(text)
    if deep is not None:
        raise json.JSONDecodeError(f"nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects", text, deep)
    try:
        value = _decoded(text)
    except json.JSONDecodeError:
        raise
    except _DuplicateKey as exc:
        key = exc.args[0]
        places = [found.start() for found in re.finditer(re.escape(json.dumps(key, ensure_ascii=False)) + r"\s*:",
                                                           text)]
        raise json.JSONDecodeError(f"a duplicate key {key!r} in one object", text,
                                   places[1] if len(places) > 1 else 0) from None
    except OverflowError:
        number = _LONG_DIGITS.search(text)
        raise json.JSONDecodeError("an integer over 1.8e308 that no float holds", text,
                                   number.start() if number else 0) from None
    except ValueError:    # "Exceeds the limit (4300 digits) for integer string conversion"
        digits = sys.get_int_max_str_digits()
        number = re.search(f"[0-9]{{{digits + 1},}}", text)
        raise json.JSONDecodeError(f"a number of more than {digits} digits", text,
                                   number.start() if number else 0) from None
    lone = _LONE_ESCAPE.search(text) if "\\u" in text else None
    if lone is not None and _has_surrogate(value):
        raise json.JSONDecodeError(f"a lone surrogate {lone.group()} that UTF-8 cannot hold", text, lone.start())
    return value


def text_lines(stream: BinaryIO, path: object, cut_ends: bool = False) -> Iterator[tuple[int, str]]:
    """(line number, text with its line ending) of each line of a binary stream of UTF-8 text (a byte order mark
    at its start is dropped); a line longer than MAX_LINE_BYTES, or not UTF-8, is a one-line error naming `path`
    and the line, and the long one is never held in memory. `cut_ends`: a line that is not UTF-8 ends the lines
    instead (a file whose writer was killed inside a character)."""
    number = 0
    while raw := stream.readline(MAX_LINE_BYTES + 1):
        number += 1
        if len(raw) > MAX_LINE_BYTES:
            raise input_error(path, f"line {number}", f"longer than {MAX_LINE_BYTES >> 20} MiB",
                              "give a file of one record a line")
        try:
            yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            if cut_ends:
                return
            raise input_error(path, f"line {number}", f"not UTF-8 text ({exc.reason} at byte {exc.start + 1} of "
                              "the line)", "convert the file to UTF-8") from None


def member_bytes(stream: BinaryIO, name: str, offset: int, size: int, limit: int | None = None) -> bytes:
    """The `size` bytes at `offset` of an uncompressed tar archive open as `stream`, by one seek (safe in any
    DataLoader worker): `offset` and `size` come from the header of member `name` (as errors show it), and a header
    claiming more bytes than the archive holds after `offset`, or more than `limit`, is a ValueError saying so
    before anything is allocated (callers name the archive)."""
    remaining = os.fstat(stream.fileno()).st_size - offset
    if size > remaining:
        raise ValueError(f"truncated tar archive: member {name} claims {size:,} bytes but the archive holds "
                         f"{max(remaining, 0):,} after its start")
    if limit is not None and size > limit:
        raise ValueError(f"member {name} claims {size:,} bytes, more than the {limit:,} such a member may have")
    stream.seek(offset)
    return stream.read(size)

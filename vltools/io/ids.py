"""The one check of an id, whatever it comes from (a JSONL field, a file or folder name, a line of a list, a tar
member name): ids name files, HTML pages and lines, so characters that break a line, hide in a terminal or
reorder the text around them are refused, and so are names that are not UTF-8."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from vltools.errors import shown

# bidirectional marks, embeddings, overrides and isolates: they make an id display as another (U+202E turns
# `gpj.exe` into what reads as `exe.jpg`)
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def id_problem(text: str) -> str | None:
    """What makes `text` unusable as an id (for a message: `'<id>' {problem}`), else None: bytes that are not
    UTF-8 (a file name's undecodable bytes arrive as lone surrogates, as does a JSON `\\udcff`), a control
    character (NUL, tab, newline, escape, ...) or a bidirectional control."""
    for char in text:
        if "\ud800" <= char <= "\udfff":
            return "is not UTF-8"
        if unicodedata.category(char) == "Cc":
            return f"holds the control character {char!r}"
        if char in BIDI_CONTROLS:
            return f"holds the bidirectional control U+{ord(char):04X}"
    return None


def escaped_id(text: str) -> str:
    """`text` with every character `id_problem` refuses written as an escape (an undecodable byte as `\\xff`, a
    tab as `\\t`, U+202E as `\\u202e`): a usable id that still shows which name it stands for."""
    out = []
    for char in text:
        if "\udc80" <= char <= "\udcff":  # a byte that was not UTF-8, as Python decodes file names
            out.append(f"\\x{ord(char) - 0xDC00:02x}")
        elif id_problem(char) is not None:
            out.append(char.encode("unicode_escape").decode("ascii"))
        else:
            out.append(char)
    return "".join(out)


def ids_problem(ids: Iterable[str], unique: bool = True) -> str | None:
    """What makes `ids`, a dataset's ids given in memory, unusable where a file's would be refused (for a message:
    `{the ids}{problem}`), else None: an id `id_problem` refuses, by its row (what a JSONL field or a file name
    holding it gets: in memory, it would be written into files and read back by `inspect`, `index` and `search`),
    or, when `unique`, an id given twice (rows matched by id would take one row for both and lose the other, as a
    features or sims file's duplicate ids are refused)."""
    rows: dict[str, int] = {}
    for row, text in enumerate(ids):
        if (problem := id_problem(text)) is not None:
            return f"[{row}] {shown(text)} {problem}, which an id cannot; ids name files and lines: remove it"
        if unique and text in rows:
            return f": duplicate id {text!r} (rows {rows[text]} and {row}); ids must be unique"
        rows[text] = row
    return None

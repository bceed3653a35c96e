"""What every converter needs: text and JSON inputs read with one-line errors, split lists, features attrs."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from vltools.errors import ArgumentError, input_error, require_file
from vltools.io.bounded import parse_json, text_lines

UNASSIGNED = "unassigned"
# split lists: {split: file}, or (split, file) pairs (a repeatable option's values, where a split can come twice)
SplitFiles = Mapping[str, str | os.PathLike] | Sequence[tuple[str, str | os.PathLike]]


def numbered_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """(line number, text without its line ending) of every line of a UTF-8 text file.

    Lines are split on "\\n" only (as SCAN's `open(..., 'rb')` loop does), so a caption containing
    another Unicode line separator stays one caption.
    """
    path = require_file(path)
    with open(path, "rb") as stream:
        for number, text in text_lines(stream, path):
            yield number, text.rstrip("\r\n")


def read_class_names(path: str | os.PathLike, size: int) -> list[str]:
    """The `size` class names of a detector vocabulary file such as the released bottom-up-attention
    objects_vocab.txt and attributes_vocab.txt: one class a line, its first comma-separated name; a file of
    `size + 1` lines starts with the background name, which is dropped."""
    lines = [(number, text.strip()) for number, text in numbered_lines(path)]
    while lines and not lines[-1][1]:
        lines.pop()
    blank = next((number for number, text in lines if not text), None)
    if blank is not None:
        raise input_error(path, f"line {blank}", "blank line", "give one class name a line")
    if len(lines) not in (size, size + 1):
        raise input_error(path, None, f"{len(lines)} class names, but the detector has {size} classes",
                          "give the vocabulary released with the detector's weights")
    return [text.split(",")[0].strip() for _, text in lines[len(lines) - size:]]


def record_unique(seen: dict, key: object, place: str, path: object, where: str, described: str, fix: str) -> None:
    """Remember that `key` (`described` in messages) first appeared at `place`; a repeat is a one-line error
    naming both places."""
    if key in seen:
        raise input_error(path, where, f"{described} repeats {seen[key]}", fix)
    seen[key] = place


def read_id_list(path: str | os.PathLike) -> list[str]:
    """Ids listed one per line (blank lines skipped); a repeated id is an error naming both lines."""
    seen: dict[str, str] = {}
    for number, text in numbered_lines(path):
        item = text.strip()
        if not item:
            continue
        record_unique(seen, item, f"line {number}", path, f"line {number}", f"id {item!r}", "list each id once")
    if not seen:
        raise input_error(path, None, "empty list: no ids", "give a file with one id per line")
    return list(seen)


def load_json(path: str | os.PathLike) -> object:
    """Parse a JSON file; a syntax error names the line and column."""
    path = require_file(path)
    try:
        return parse_json(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise input_error(path, f"line {exc.lineno} column {exc.colno}", f"malformed JSON ({exc.msg})",
                          "fix the file or download it again") from None
    except UnicodeDecodeError as exc:
        raise input_error(path, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})",
                          "JSON files must be UTF-8") from None


def field(record: object, name: str, types: type | tuple[type, ...], path: object, where: str) -> object:
    """`record[name]` checked to be of `types` (bool is never a number); errors name file and record."""
    if not isinstance(record, dict):
        raise input_error(path, where, f"expected a JSON object, found {type(record).__name__}")
    if name not in record:
        raise input_error(path, where, f"missing field '{name}'")
    value = record[name]
    if isinstance(value, bool) or not isinstance(value, types):
        wanted = " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))
        raise input_error(path, where, f"field '{name}' must be {wanted}, found {json.dumps(value)[:60]}")
    return value


def json_list(value: object, path: object, where: str, what: str) -> list:
    """`value` checked to be a JSON array (`what` names it in the error)."""
    if not isinstance(value, list):
        raise input_error(path, where, f"expected {what} as a JSON array, found {type(value).__name__}")
    return value


def split_assignments(split_files: SplitFiles) -> dict[str, str]:
    """Map each id listed in the split files ({split name: path}, or (split, path) pairs as a repeatable option
    gives them) to its split; a split named twice (argument `split_files`) or an id in two lists is an error."""
    files: dict[str, str | os.PathLike] = {}
    for split, path in split_files.items() if isinstance(split_files, Mapping) else split_files:
        if split in files:
            raise ArgumentError("split_files", f"names split {split!r} twice; give one file per split")
        files[split] = path
    assignment: dict[str, str] = {}
    origin: dict[str, str | os.PathLike] = {}
    for split, path in files.items():
        for item in read_id_list(path):
            if item in assignment:
                raise input_error(path, None, f"id {item!r} is also in the {assignment[item]} list {origin[item]}",
                                  "each id may be in one split only")
            assignment[item] = split
            origin[item] = path
    return assignment


def features_attrs(backbone: str, regions: str, source: object) -> dict[str, str]:
    """Attributes of a features file imported from elsewhere: the extractor's weights are not known."""
    return {"backbone": backbone, "weights": "unknown", "regions": regions, "source": str(source)}

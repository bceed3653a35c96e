"""Records given in memory where a file is read (the Python API: `score_caption(records, refs)` with the records
`vltools.convert` returned): each is written to a temporary file in its place, so that it goes through the one
reader of that kind of file, with every check the file gets, and scores the same as the file would.

An error the reader raises names the temporary file; `spooled` names the argument instead, with the record's
index: `refs[2]: no 'image_id' or 'pair_id' field` for line 3 of the file written from `refs`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from vltools.errors import ArgumentError, VLToolsError, first_line
from vltools.io.atomic import spool_folder
from vltools.io.jsonl import json_writer


def in_memory(value: object) -> bool:
    """Whether `value` is records in memory: a list (or tuple) of dicts, or a dict (one JSON document, such as
    COCO annotations)."""
    return isinstance(value, dict) or (isinstance(value, list | tuple) and bool(value)
                                       and all(isinstance(item, dict) for item in value))


def _write(path: Path, value: dict | list | tuple, name: str) -> None:
    """`value` as one JSON document (a dict) or one record a line; a value JSON cannot hold is `name`'s error."""
    lines = [value] if isinstance(value, dict) else value
    with open(path, "w", encoding="utf-8") as stream:
        writer = json_writer(stream)
        for number, record in enumerate(lines):
            try:
                writer.write(record)
            except (TypeError, ValueError) as exc:    # a numpy number, a set, a cycle
                where = "" if isinstance(value, dict) else f"[{number}]"
                raise ArgumentError(name, f"{where} cannot be written as JSON ({first_line(exc)}); give plain "
                                          "str, int, float, list and dict values") from None


def _named(message: str, files: Mapping[str, Path]) -> str:
    """`message` with each temporary file named by its argument: line N as the record [N - 1]."""
    for name, path in files.items():
        message = re.sub(rf"{re.escape(str(path))}: line (\d+)",
                         lambda found, name=name: f"{name}[{int(found.group(1)) - 1}]", message)
        message = message.replace(str(path), f"{name} (in memory)")
    return message


@contextmanager
def spooled(values: Mapping[str, object]) -> Iterator[dict[str, object]]:
    """`values` (argument name -> a file path, or records in memory, see `in_memory`) with each in-memory one
    written to a temporary file in its place (JSON lines; a dict as one JSON document), removed when the block
    ends; an error raised in the block names the arguments instead of the temporary files."""
    if not any(in_memory(value) for value in values.values()):
        yield dict(values)
        return
    with spool_folder() as folder:
        files = {}
        for name, value in values.items():
            if in_memory(value):
                files[name] = folder / f"{name}.{'json' if isinstance(value, dict) else 'jsonl'}"
                _write(files[name], value, name)
        try:
            yield {**values, **{name: os.fspath(path) for name, path in files.items()}}
        except VLToolsError as exc:
            raise VLToolsError(_named(str(exc), files)) from None

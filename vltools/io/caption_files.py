"""Caption files for scoring: JSONL captions records or any COCO caption JSON, grouped by id.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from vltools.errors import input_error
from vltools.io.bounded import parse_json
from vltools.io.coco import read_coco
from vltools.io.jsonl import iter_json_lines


@dataclass
class CaptionFile:
    """Captions of one file grouped by id, in file order, with where each came from (for error messages)."""

    path: str
    key: str
    texts: dict[str, list[str]] = field(default_factory=dict)
    where: dict[str, list[str]] = field(default_factory=dict)

    def add(self, item_id: str, text: str, where: str) -> None:
        self.texts.setdefault(item_id, []).append(text)
        self.where.setdefault(item_id, []).append(where)


def _id_string(value: object, path: str, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise input_error(path, where, f"id must be a string or an integer, found {json.dumps(value)[:40]}")
    return str(value)


def _add_jsonl(result: CaptionFile, path: str) -> None:
    for number, record in iter_json_lines(path, "fix or remove that line"):
        where = f"line {number}"
        if not isinstance(record, dict):
            raise input_error(path, where, "expected a JSON object")
        key = "pair_id" if "pair_id" in record else "image_id"
        if key not in record:
            raise input_error(path, where, "no 'image_id' or 'pair_id' field", "each caption needs the id it describes")
        if result.key and key != result.key:
            raise input_error(path, where, f"record keyed by '{key}' but earlier ones by '{result.key}'",
                              "a file holds either image captions or pair descriptions")
        result.key = key
        caption = record.get("caption", record.get("description"))
        if not isinstance(caption, str):
            raise input_error(path, where, "no string 'caption' (or 'description') field",
                              "give the text to score or to score against")
        result.add(_id_string(record[key], path, where), caption, where)


def _is_coco_json(path: str) -> bool:
    """Whether a file is one JSON document in a COCO layout (a list, or an object with 'annotations')."""
    if path == "-" or not Path(path).is_file():
        return False
    with open(path, encoding="utf-8", errors="replace") as stream:
        head = stream.read(4096).lstrip()
    if head.startswith("["):
        return True
    if not head.startswith("{"):
        return False
    try:
        whole = parse_json(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False  # JSONL: several objects
    return isinstance(whole, dict) and "annotations" in whole


def read_caption_file(path: str | os.PathLike) -> CaptionFile:
    """Read captions keyed by image or pair id from JSONL, or a COCO annotations / results / SPICE-input JSON."""
    path = str(path)
    result = CaptionFile(path, key="")
    if _is_coco_json(path):
        result.key = "image_id"
        for number, record in enumerate(read_coco(path)):
            result.add(record["image_id"], record["caption"], f"entry {number}")
    else:
        _add_jsonl(result, path)
    if not result.texts:
        raise input_error(path, None, "empty file: no captions", "give captions JSONL, pairs JSONL or COCO JSON")
    return result

"""JSONL records (captions, region captions, pairs, rankings, image lists, user-study votes, mined triplets)
with validation, read and written through io/jsonl.py (jsonlines).

Every error names the file, the line number and the field, and says what to do.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vltools.errors import VLToolsError, input_error
from vltools.io.ids import id_problem
from vltools.io.jsonl import iter_json_lines, write_json_lines
from vltools.io.output import text_output
from vltools.io.progress import log


def _is_str(value: object) -> bool:
    return isinstance(value, str)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_box(value: object) -> bool:
    return isinstance(value, list) and len(value) == 4 and all(_is_number(v) for v in value)


def _is_str_list(value: object) -> bool:
    return isinstance(value, list) and all(_is_str(v) for v in value)


def _is_number_list(value: object) -> bool:
    return isinstance(value, list) and all(_is_number(v) for v in value)


def _is_box_list(value: object) -> bool:
    return isinstance(value, list) and all(_is_box(v) for v in value)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


TYPE_NAMES = {
    _is_str: "a string",
    _is_box: "a list of 4 numbers [x1, y1, x2, y2]",
    _is_str_list: "a list of strings",
    _is_number_list: "a list of numbers",
    _is_box_list: "a list of [x1, y1, x2, y2] boxes",
    _is_count: "a non-negative integer count",
}


@dataclass(frozen=True)
class Schema:
    """Fields of one JSONL kind: required and optional, each with its type check, and the unique key."""

    name: str
    required: dict = field(default_factory=dict)
    optional: dict = field(default_factory=dict)
    key: tuple[str, ...] = ()
    choices: dict = field(default_factory=dict)


SCHEMAS = {
    "captions": Schema("captions", {"image_id": _is_str, "caption": _is_str},
                       {"split": _is_str, "caption_id": _is_str}, key=("caption_id",)),
    "regions": Schema("regions", {"image_id": _is_str, "caption": _is_str, "box": _is_box},
                      {"split": _is_str, "region_id": _is_str}, key=("region_id",)),
    "pairs": Schema("pairs", {"pair_id": _is_str, "image_a": _is_str, "image_b": _is_str},
                    {"description": _is_str, "split": _is_str}, key=()),
    "rankings": Schema("rankings", {"query": _is_str, "direction": _is_str, "ids": _is_str_list,
                                    "scores": _is_number_list}, key=("query", "direction"),
                       choices={"direction": ("i2t", "t2i", "i2i")}),
    "images": Schema("images", {"image_id": _is_str, "path": _is_str}, {"boxes": _is_box_list, "split": _is_str},
                     key=("image_id",)),
    # user-study triplets (Gordo & Larlus section 3): o1 / o2 annotators chose a / b, o3 neither
    "votes": Schema("votes", {"query": _is_str, "a": _is_str, "b": _is_str, "o1": _is_count, "o2": _is_count,
                              "o3": _is_count}),
    # training triplets written by mine-triplets
    "triplets": Schema("triplets", {"query": _is_str, "positive": _is_str, "negative": _is_str}),
}


def detect_kind(record: dict) -> str | None:
    """Guess the JSONL kind of a record from its fields (used by `inspect`)."""
    if "direction" in record and "query" in record:
        return "rankings"
    if "o1" in record:
        return "votes"
    if "positive" in record and "negative" in record:
        return "triplets"
    if "pair_id" in record:
        return "pairs"
    if "box" in record:
        return "regions"
    if "caption" in record:
        return "captions"
    if "path" in record:
        return "images"
    return None


ID_FIELDS = ("image_id", "caption_id", "region_id", "pair_id", "image_a", "image_b", "query", "ids", "a", "b",
             "positive", "negative")


def _value_problem(value: object) -> str | None:
    """What makes a string, or a list of strings, unusable as ids (vltools.io.ids.id_problem), else None."""
    for text in value if isinstance(value, list) else [value]:
        if isinstance(text, str) and (problem := id_problem(text)) is not None:
            return problem
    return None


def validate_record(record: object, schema: Schema, path: object, line: int | str) -> dict:
    """Check one decoded line (`line`: its number, or where a converter's source record is, e.g. `images[3]`)
    against `schema`; raise a one-line error naming file, line and field."""
    where = f"line {line}" if isinstance(line, int) else line
    if not isinstance(record, dict):
        raise input_error(path, where, f"expected a JSON object, found {type(record).__name__}",
                          f"each line must be one {schema.name} record")
    for name, check in schema.required.items():
        if name not in record:
            raise input_error(path, where, f"missing field '{name}'", f"every {schema.name} record needs it")
        if not check(record[name]):
            raise input_error(path, where, f"field '{name}' must be {TYPE_NAMES[check]}, "
                              f"found {json.dumps(record[name])[:60]}")
    for name, check in schema.optional.items():
        if name in record and record[name] is not None and not check(record[name]):
            raise input_error(path, where, f"field '{name}' must be {TYPE_NAMES[check]}, "
                              f"found {json.dumps(record[name])[:60]}")
    for name, allowed in schema.choices.items():
        if record[name] not in allowed:
            raise input_error(path, where, f"field '{name}' is {record[name]!r}", f"use one of {', '.join(allowed)}")
    if schema.name == "rankings" and len(record["ids"]) != len(record["scores"]):
        raise input_error(path, where, "fields 'ids' and 'scores' have different lengths")
    for name in ID_FIELDS:
        if (problem := _value_problem(record.get(name))) is not None:
            raise input_error(path, where, f"field '{name}' {problem}", "ids name files and lines: remove it")
    return record


def id_file_name(ids: Sequence[str], suffix: str) -> str:
    """The file name of what `ids` name (joined by `__`, e.g. a query and a result), kept inside any folder it is
    joined to: path separators become `_`, a leading `.` (a hidden file, or `..`) becomes `_`, and a name too long
    for a file system is cut and given a hash of the whole. Every stage that turns ids into file names uses it,
    so that the stage reading them (report) finds what the stage writing them (explain) wrote."""
    name = "__".join(ids).replace("/", "_").replace("\\", "_")
    if name.startswith("."):
        name = "_" + name[1:]
    if len(name.encode("utf-8")) + len(suffix.encode("utf-8")) > MAX_NAME_BYTES:
        digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]
        name = name.encode("utf-8")[:MAX_NAME_BYTES // 2].decode("utf-8", "ignore") + "-" + digest
    return name + suffix


def check_converted(record: dict, kind: str, source: object, where: str) -> dict:
    """What a converter writes, checked against the schema `kind`'s readers use, before it is written: an error
    names the source file and record (`where`), so what a converter cannot convert is never written."""
    return validate_record(record, SCHEMAS[kind], source, where)


TEXT_FIELDS = {"captions": "caption", "regions": "caption", "pairs": "description"}
MAX_NAME_BYTES = 255    # the longest file name of common file systems


def iter_records(path: str | os.PathLike, kind: str) -> Iterator[dict]:
    """Stream validated records of `kind` from a JSONL file; duplicate keys are errors. Empty or blank captions
    (descriptions) are kept, and counted in one warning: a metric or a vocabulary built from them may mislead."""
    schema = SCHEMAS[kind]
    seen: dict[tuple, int] = {}
    count = 0
    blank: list[int] = []
    for number, record in iter_json_lines(path, "fix or remove that line"):
        validate_record(record, schema, path, number)
        if schema.key and all(record.get(k) is not None for k in schema.key):
            key = tuple(record[k] for k in schema.key)
            if key in seen:
                shown = "/".join(key)
                raise input_error(path, f"line {number}", f"duplicate {'/'.join(schema.key)} {shown!r} "
                                  f"(first on line {seen[key]})", "ids must be unique")
            seen[key] = number
        elif kind == "pairs":
            key = (record["pair_id"], record.get("description"))
            if key in seen:
                raise input_error(path, f"line {number}", f"duplicate pair_id {record['pair_id']!r} with the same "
                                  f"description (first on line {seen[key]})", "remove the repeated line")
            seen[key] = number
        text = record.get(TEXT_FIELDS.get(kind, ""))
        if isinstance(text, str) and not text.strip():
            blank.append(number)
        count += 1
        yield record
    if blank:
        log.warning("%s: %d of %d records have an empty or blank %s (first on line %d)", path, len(blank), count,
                    TEXT_FIELDS[kind], blank[0])
    if count == 0:
        if Path(str(path)).suffix.lower() in (".h5", ".hdf5"):
            raise input_error(path, None, "not an HDF5 file (empty, or no HDF5 signature) and no JSONL records "
                              "either", "it may be truncated; rerun the stage that wrote it")
        raise input_error(path, None, f"empty file: no {kind} records", f"give a JSONL file with one {kind} record "
                          "per line")


def caption_ids(records: Iterable[dict], path: object = "captions") -> list[str]:
    """Each caption's id: its `caption_id`, else `<image_id>#<k>` with k its 0-based index among its image's.

    Every stage that names captions uses this, so rankings, sims and scores agree on ids.
    """
    seen: dict[str, int] = {}
    ids = []
    for record in records:
        k = seen.get(record["image_id"], 0)
        seen[record["image_id"]] = k + 1
        ids.append(record.get("caption_id") or f"{record['image_id']}#{k}")
    if len(set(ids)) != len(ids):
        first: dict[str, int] = {}
        for number, caption_id in enumerate(ids, 1):
            if caption_id in first:
                raise VLToolsError(f"{path}: caption {number} and caption {first[caption_id]} both have the id "
                                   f"{caption_id!r} (an explicit caption_id equal to a generated <image_id>#<k>); "
                                   "give every caption a caption_id, or none")
            first[caption_id] = number
    return ids


def ranking_records(query_ids: Sequence[str], gallery_ids: Sequence[str], values: np.ndarray, indices: np.ndarray,
                    direction: str) -> Iterator[dict]:
    """Rankings records (vltools `rankings` JSONL kind) from top-k scores and gallery indices, queries in order.

    Index -1 marks a missing result (FAISS's, when an IVF probe found fewer than k; the padding of lists shorter
    than the longest); those are dropped.
    """
    for query, row_values, row_indices in zip(query_ids, np.asarray(values), np.asarray(indices), strict=True):
        keep = row_indices >= 0
        yield {"query": query, "direction": direction,
               "ids": [gallery_ids[i] for i in row_indices[keep]],
               "scores": [float(v) for v in row_values[keep]]}


def read_records(path: str | os.PathLike, kind: str) -> list[dict]:
    """All validated records of `kind` from a JSONL file (`-` for standard input)."""
    return list(iter_records(path, kind))


def write_records(path: str | os.PathLike | None, records: Iterable[dict]) -> int:
    """Write records as JSONL, atomically to `path` or to standard output; return how many."""
    with text_output(path) as stream:
        return write_json_lines(stream, records)

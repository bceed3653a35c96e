"""COCO caption files <-> captions JSONL.

Read: the annotations file (`{"images": [...], "annotations": [{"image_id", "id", "caption"}]}`), a results
file (`[{"image_id", "caption"}]`, what the evaluation server takes), or the coco-caption SPICE input
layout (`[{"image_id", "test", "refs": [...]}]`, read as its references). Write: a results file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from vltools.errors import argument, input_error
from vltools.io.output import write_json
from vltools.io.records import check_converted, read_records
from vltools.io.sources import field, json_list, load_json, record_unique

ID_FIELDS = ("id", "file_name")


def _caption(record: dict, name: str, path: object, where: str) -> str:
    text = str(field(record, name, str, path, where)).strip()
    if not text:
        raise input_error(path, where, f"empty '{name}'", "fix or remove that entry")
    return text


def coco_layout(data: object) -> str:
    """Which COCO layout a parsed JSON is: `annotations`, `results`, `refs`, or `unknown`."""
    if isinstance(data, dict) and "annotations" in data:
        return "annotations"
    if isinstance(data, list) and data and isinstance(data[0], dict):
        if "refs" in data[0]:
            return "refs"
        if "caption" in data[0]:
            return "results"
    return "unknown"


def _with_split(record: dict, split: str | None) -> dict:
    return {**record, "split": split} if split else record


def coco_annotations_records(data: dict, path: object, split: str | None, id_field: str = "id") -> list[dict]:
    """Captions of a COCO annotations file in annotation order; image ids are checked against `images`."""
    images = json_list(data.get("images", []), path, "top level", "images")
    names: dict[int, str] = {}
    for index, image in enumerate(images):
        where = f"images[{index}]"
        image_key = field(image, "id", int, path, where)
        names[image_key] = str(field(image, "file_name", str, path, where)) if id_field == "file_name" else str(
            image_key)
    if id_field == "file_name" and not names:
        raise input_error(path, "top level", "no 'images' list to take file names from",
                          f"use {argument('id_field', 'id')}")
    records = []
    seen: dict[int, str] = {}
    for index, annotation in enumerate(json_list(data["annotations"], path, "top level", "annotations")):
        where = f"annotations[{index}]"
        image_key = field(annotation, "image_id", int, path, where)
        caption_key = field(annotation, "id", int, path, where)
        record_unique(seen, caption_key, f"annotations[{index}]", path, where, f"annotation id {caption_key}",
                      "annotation ids must be unique")
        if names and image_key not in names:
            raise input_error(path, where, f"image_id {image_key} is not in 'images'", "the file is inconsistent")
        records.append(check_converted(_with_split({"image_id": names.get(image_key, str(image_key)),
                                                    "caption": _caption(annotation, "caption", path, where),
                                                    "caption_id": str(caption_key)}, split), "captions", path, where))
    return records


def coco_results_records(data: list, path: object, split: str | None) -> list[dict]:
    """Captions of a results file (one candidate per image), in file order; an image twice is an error."""
    records = []
    seen: dict[str, str] = {}
    for index, result in enumerate(data):
        where = f"[{index}]"
        image_id = str(field(result, "image_id", (int, str), path, where))
        record_unique(seen, image_id, where, path, where, f"image_id {image_id}",
                      "a results file has one caption per image")
        records.append(check_converted(_with_split({"image_id": image_id,
                                                    "caption": _caption(result, "caption", path, where)}, split),
                                       "captions", path, where))
    return records


def coco_refs_records(data: list, path: object, split: str | None) -> list[dict]:
    """Reference captions of the SPICE input layout; caption_id = `{image_id}#{k}`."""
    records = []
    seen: dict[str, str] = {}
    for index, entry in enumerate(data):
        where = f"[{index}]"
        image_id = str(field(entry, "image_id", (int, str), path, where))
        record_unique(seen, image_id, where, path, where, f"image_id {image_id}", "the file is inconsistent")
        refs = json_list(field(entry, "refs", list, path, where), path, where, "refs")
        for k, ref in enumerate(refs):
            if not isinstance(ref, str) or not ref.strip():
                raise input_error(path, f"{where}.refs[{k}]", "expected a non-empty caption string")
            records.append(check_converted(_with_split({"image_id": image_id, "caption": ref.strip(),
                                                        "caption_id": f"{image_id}#{k}"}, split), "captions", path,
                                           f"{where}.refs[{k}]"))
    return records


def read_coco(path: str | os.PathLike, split: str | None = None, id_field: str = "id") -> list[dict]:
    """Captions records of any COCO caption layout (detected from the content)."""
    if id_field not in ID_FIELDS:
        raise ValueError(f"id_field must be one of {ID_FIELDS}")
    data = load_json(path)
    layout = coco_layout(data)
    if layout != "annotations" and id_field != "id":
        raise input_error(path, None, f"{argument('id_field', id_field)} needs an annotations file, this is a "
                          f"{layout} file", f"drop {argument('id_field')}")
    if layout == "annotations":
        records = coco_annotations_records(data, path, split, id_field)
    elif layout == "results":
        records = coco_results_records(data, path, split)
    elif layout == "refs":
        records = coco_refs_records(data, path, split)
    else:
        raise input_error(path, "top level", "not a COCO caption file",
                          "expected {'images', 'annotations'}, a results list [{image_id, caption}], "
                          "or a SPICE input list [{image_id, refs}]")
    if not records:
        raise input_error(path, None, "no captions", "give a file with captions")
    return records


def coco_results(records: Iterable[dict], path: object) -> list[dict]:
    """A COCO results list `[{"image_id", "caption"}]` from captions records, one per image.

    Image ids become ints when every id is a decimal number (as COCO's evaluation expects), else stay strings.
    """
    records = list(records)
    seen: dict[str, int] = {}
    for number, record in enumerate(records, 1):
        if record["image_id"] in seen:
            raise input_error(path, f"record {number}", f"image {record['image_id']!r} has a second caption "
                              f"(first in record {seen[record['image_id']]})",
                              "a results file holds one caption per image; keep one")
        seen[record["image_id"]] = number
    numeric = all(record["image_id"].isascii() and record["image_id"].isdecimal() for record in records)
    return [{"image_id": int(record["image_id"]) if numeric else record["image_id"], "caption": record["caption"]}
            for record in records]


def write_coco_results(captions: str | os.PathLike, output: str | os.PathLike | None) -> dict[str, int]:
    """`vltools convert to-coco-results`: a captions JSONL (one caption per image) as a COCO results JSON at
    `output` (None: standard output); returns {"results": how many}."""
    results = coco_results(read_records(captions, "captions"), captions)
    write_json(output, results)
    return {"results": len(results)}

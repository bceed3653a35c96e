"""Visual Genome `region_descriptions.json` (phrase + x, y, width, height per region) -> region captions JSONL.

Optional inputs: `image_data.json` (each image's width and height: recorded as `image_size` [h, w] and
usable to clip boxes) and a splits JSON `{split: [image ids]}` (DenseCap's `densecap_splits.json` layout).
"""

from __future__ import annotations

import math
import os

from vltools.errors import ArgumentError, argument, input_error
from vltools.io.progress import log
from vltools.io.records import check_converted
from vltools.io.sources import UNASSIGNED, field, json_list, load_json, record_unique

NUMBER = (int, float)


def _image_key(entry: object, path: object, where: str) -> str:
    """The image id of an entry: `image_id` (image_data, VG 1.0) or `id` (VG 1.2 region files)."""
    name = "image_id" if isinstance(entry, dict) and "image_id" in entry else "id"
    return str(field(entry, name, (int, str), path, where))


def read_image_sizes(path: str | os.PathLike) -> dict[str, tuple[int, int]]:
    """(height, width) of each image of an `image_data.json`."""
    sizes = {}
    for index, image in enumerate(json_list(load_json(path), path, "top level", "images")):
        where = f"[{index}]"
        sizes[_image_key(image, path, where)] = (int(field(image, "height", int, path, where)),
                                                 int(field(image, "width", int, path, where)))
    return sizes


def read_split_lists(path: str | os.PathLike) -> dict[str, str]:
    """Image id -> split from a JSON `{split: [image ids]}`; an image in two splits is an error."""
    data = load_json(path)
    if not isinstance(data, dict):
        raise input_error(path, "top level", "expected a JSON object {split: [image ids]}")
    assignment: dict[str, str] = {}
    for split, ids in data.items():
        for index, image_id in enumerate(json_list(ids, path, split, "image ids")):
            key = str(image_id)
            if key in assignment:
                raise input_error(path, f"{split}[{index}]", f"image {key} is also in split {assignment[key]}",
                                  "each image may be in one split only")
            assignment[key] = split
    return assignment


def region_box(region: dict, path: object, where: str) -> list[float]:
    """[x1, y1, x2, y2] from VG's x, y, width, height (x2 = x + width)."""
    x, y, width, height = (field(region, name, NUMBER, path, where) for name in ("x", "y", "width", "height"))
    return [x, y, x + width, y + height]


def clip_box(box: list[float], size: tuple[int, int]) -> list[float]:
    """`box` clipped to an image of (height, width)."""
    height, width = size
    return [min(max(box[0], 0), width), min(max(box[1], 0), height),
            min(max(box[2], 0), width), min(max(box[3], 0), height)]


def read_visual_genome(path: str | os.PathLike, image_sizes: dict[str, tuple[int, int]] | None = None,
                       splits: dict[str, str] | None = None, clip: bool = False,
                       drop_unassigned: bool = False) -> list[dict]:
    """Region captions records in file order: image_id, caption (the phrase), box, region_id, split?, image_size?

    Regions with an empty phrase or a box of no area (after clipping) are skipped and counted in the log.
    """
    if clip and image_sizes is None:
        raise ValueError("clipping boxes needs the image sizes")
    records = []
    skipped = {"empty phrase": 0, "box of no area": 0, "a NaN or infinite box": 0}
    seen: dict[str, str] = {}
    for index, entry in enumerate(json_list(load_json(path), path, "top level", "images")):
        where = f"[{index}]"
        image_id = _image_key(entry, path, where)
        size = None
        if image_sizes is not None:
            if image_id not in image_sizes:
                raise input_error(path, where, f"image {image_id} is not in the image data file",
                                  "give the image_data.json of the same release")
            size = image_sizes[image_id]
        split = None
        if splits is not None:
            split = splits.get(image_id)
            if split is None and drop_unassigned:
                continue
            split = split or UNASSIGNED
        for number, region in enumerate(json_list(field(entry, "regions", list, path, where), path, where,
                                                  "regions")):
            at = f"{where}.regions[{number}]"
            region_id = str(field(region, "region_id", (int, str), path, at))
            record_unique(seen, region_id, at, path, at, f"region_id {region_id}", "region ids must be unique")
            phrase = str(field(region, "phrase", str, path, at)).strip()
            box = region_box(region, path, at)
            if clip:
                box = clip_box(box, size)
            if not phrase:
                skipped["empty phrase"] += 1
                continue
            if not all(math.isfinite(value) for value in box):
                skipped["a NaN or infinite box"] += 1
                continue
            if box[2] <= box[0] or box[3] <= box[1]:
                skipped["box of no area"] += 1
                continue
            record = {"image_id": image_id, "caption": phrase, "box": box, "region_id": region_id}
            if split is not None:
                record["split"] = split
            if size is not None:
                record["image_size"] = list(size)
            records.append(check_converted(record, "regions", path, at))
    for reason, count in skipped.items():
        if count:
            log.warning("%s: skipped %d regions with %s", path, count, reason)
    if not records:
        raise input_error(path, None, "no regions", "give a region_descriptions.json with regions")
    return records


def visual_genome_records(regions: str | os.PathLike, image_data: str | os.PathLike | None = None,
                          splits: str | os.PathLike | None = None, clip_boxes: bool = False,
                          drop_unassigned: bool = False) -> list[dict]:
    """`vltools convert visual-genome`: the region captions records of a region_descriptions.json, with each
    image's size from `image_data` (image_data.json; needed to `clip_boxes`) and its split from `splits` (JSON
    {split: [image ids]}; images in none get "unassigned", or are dropped with `drop_unassigned`)."""
    if clip_boxes and image_data is None:
        raise ArgumentError("clip_boxes", f"needs {argument('image_data')}: the image sizes to clip to")
    sizes = read_image_sizes(image_data) if image_data is not None else None
    assignment = read_split_lists(splits) if splits is not None else None
    return read_visual_genome(regions, sizes, assignment, clip_boxes, drop_unassigned)

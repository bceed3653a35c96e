"""What a detector found, drawn on the report's thumbnails: each box with its object and attribute ("red car").

The boxes come from a features file with `/boxes` (original-image pixels), and, when the extractor wrote them
(`extract-regions --regions bottom-up`), `/labels` and `/attributes` with their names in the `label_names` and
`attribute_names` attributes; without names a box shows its class number, without labels only its outline.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from vltools.errors import VLToolsError
from vltools.io.bounded import parse_json
from vltools.io.features import FeaturesReader
from vltools.io.progress import log

COLOURS = ("#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#bfef45")


@dataclass(frozen=True)
class Box:
    """One detected region: x1 y1 x2 y2 in original-image pixels and its caption ("red car", or "")."""

    x1: float
    y1: float
    x2: float
    y2: float
    label: str


def _names(reader: FeaturesReader, key: str) -> list[str] | None:
    value = reader.attrs.get(key)
    if value is None:
        return None
    try:
        names = parse_json(value)
    except (TypeError, json.JSONDecodeError):
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise VLToolsError(f"{reader.path}: attribute {key} is not a JSON list of names; extract the features again")
    return names


def _label(index: int | None, names: list[str] | None, prefix: str) -> str:
    if index is None or index < 0:
        return ""
    if names is None:
        return f"{prefix}{index}"
    return names[index] if index < len(names) else f"{prefix}{index}"


def read_boxes(path: str | os.PathLike, ids: list[str], max_boxes: int) -> dict[str, list[Box]]:
    """The `max_boxes` best boxes (by `/label_scores` when present, else in file order) of each id of `ids`
    that the features file holds; a file without `/boxes` is a one-line error, one holding none of `ids` a
    one-line warning (the report would silently show no boxes)."""
    with FeaturesReader(path) as reader:
        if "boxes" not in reader.fields:
            raise VLToolsError(f"{path}: has no /boxes dataset; give the features of extract-regions with detector "
                               "or bottom-up regions")
        known = [i for i in ids if i in reader.index]
        if ids and not known:
            log.warning("report --boxes: %s holds none of the %d shown images (e.g. %r), so no boxes are drawn; give "
                        "the features extracted from these images", path, len(ids), ids[0])
        fields = [f for f in ("boxes", "num_regions", "labels", "label_scores", "attributes") if f in reader.fields]
        arrays = reader.read(known, fields) if known else {}
        objects, attributes = _names(reader, "label_names"), _names(reader, "attribute_names")
    result: dict[str, list[Box]] = {}
    for row, image_id in enumerate(known):
        boxes = arrays["boxes"][row]
        count = int(arrays["num_regions"][row]) if "num_regions" in arrays else len(boxes)
        order = np.arange(count)
        if "label_scores" in arrays:
            order = order[np.argsort(-arrays["label_scores"][row][:count], kind="stable")]
        chosen = []
        for k in order[:max_boxes]:
            obj = _label(int(arrays["labels"][row][k]), objects, "class ") if "labels" in arrays else ""
            attr = _label(int(arrays["attributes"][row][k]), attributes, "attr ") if "attributes" in arrays else ""
            chosen.append(Box(*map(float, boxes[k]), label=" ".join(t for t in (attr, obj) if t)))
        result[image_id] = chosen
    return result


def draw_boxes(image: Image.Image, boxes: list[Box], scale: float) -> None:
    """Draw `boxes` (original pixels, times `scale` to this image's pixels) and their labels onto `image`."""
    draw = ImageDraw.Draw(image)
    for n, box in enumerate(boxes):
        colour = COLOURS[n % len(COLOURS)]
        corners = [box.x1 * scale, box.y1 * scale, box.x2 * scale, box.y2 * scale]
        draw.rectangle(corners, outline=colour, width=2)
        if box.label:
            left, top = corners[0] + 2, max(corners[1] - 11, 0)
            text_box = draw.textbbox((left, top), box.label)
            draw.rectangle(text_box, fill=colour)
            draw.text((left, top), box.label, fill="white")

"""The Birds-to-Words TSV (Forbes et al. 2019) -> pairs JSONL, one record per description.

Eleven tab-separated columns, optionally under a header row: img1ObservationURL, img1ImgURL, img1Species,
img1Selection, the same four for img2, split, annN, description. iNaturalist image URLs end in
`photos/<id>/medium.jpg`, so their basenames are not unique: image ids default to the URL path. Cells are
split on tabs only (no quoting): a quote is text, as in the dataset's descriptions.
"""

from __future__ import annotations

import csv
import hashlib
import os
from pathlib import Path
from urllib.parse import urlparse

from vltools.errors import VLToolsError, argument, input_error
from vltools.io.records import check_converted
from vltools.io.sources import UNASSIGNED

COLUMNS = ("img1ObservationURL", "img1ImgURL", "img1Species", "img1Selection",
           "img2ObservationURL", "img2ImgURL", "img2Species", "img2Selection", "split", "annN", "description")
IMAGE_NAMES = ("path", "basename", "url")


def pair_id(url_a: str, url_b: str) -> str:
    """A stable id of an ordered image pair: the first 16 hex digits of sha1(`url_a` TAB `url_b`)."""
    return hashlib.sha1(f"{url_a}\t{url_b}".encode()).hexdigest()[:16]


def image_name(url: str, style: str) -> str:
    """The image id of `url`: its path without the leading slash, its basename, or the whole URL."""
    if style == "url":
        return url
    path = urlparse(url).path.lstrip("/")
    return path.rsplit("/", 1)[-1] if style == "basename" else path


def read_birds_to_words(path: str | os.PathLike, image_names: str = "path") -> list[dict]:
    """Pairs records (pair_id, image_a, image_b, description, split) in file order."""
    if image_names not in IMAGE_NAMES:
        raise ValueError(f"image_names must be one of {IMAGE_NAMES}")
    path = Path(path)
    if not path.is_file():
        raise VLToolsError(f"{path}: no such file")
    records = []
    owner: dict[str, str] = {}
    with open(path, encoding="utf-8", newline="") as stream:
        reader = csv.reader(stream, delimiter="\t", quoting=csv.QUOTE_NONE)
        try:
            for row in reader:
                where = f"line {reader.line_num}"
                if not any(cell.strip() for cell in row):
                    continue
                if row[0] == COLUMNS[0]:
                    continue
                if len(row) != len(COLUMNS):
                    raise input_error(path, where, f"{len(row)} columns instead of {len(COLUMNS)}",
                                      f"the columns are {', '.join(COLUMNS)}")
                cells = dict(zip(COLUMNS, (cell.strip() for cell in row), strict=True))
                url_a, url_b = cells["img1ImgURL"], cells["img2ImgURL"]
                if not url_a or not url_b:
                    raise input_error(path, where, "empty image URL", "every row needs img1ImgURL and img2ImgURL")
                if not cells["description"]:
                    raise input_error(path, where, "empty description", "fix or remove that row")
                image_a, image_b = image_name(url_a, image_names), image_name(url_b, image_names)
                for url, image in ((url_a, image_a), (url_b, image_b)):
                    if owner.setdefault(image, url) != url:
                        raise input_error(path, where, f"image name {image!r} is shared by {owner[image]} and {url}",
                                          f"use {argument('image_names', 'path')} or url")
                records.append(check_converted({"pair_id": pair_id(url_a, url_b), "image_a": image_a,
                                                "image_b": image_b, "description": cells["description"],
                                                "split": cells["split"] or UNASSIGNED}, "pairs", path, where))
        except UnicodeDecodeError as exc:
            raise input_error(path, f"line {reader.line_num + 1}", f"not UTF-8 text ({exc.reason})") from None
        except csv.Error as exc:
            raise input_error(path, f"line {reader.line_num}", f"malformed TSV ({exc})") from None
    if not records:
        raise input_error(path, None, "no pairs", "give the birds-to-words TSV")
    return records

"""Hugging Face image-caption datasets (a `save_to_disk` folder or parquet files; the layouts and columns read are
vltools.io.hf's) -> a vltools folder as `vltools synth` writes one: `images/` (each image's bytes written once, as
they are), `images.jsonl` (`images` kind: image_id, path, split) and `captions.jsonl` (`captions` kind: image_id,
caption, split, caption_id). Ids and splits are the dataset's; an image whose bytes do not decode, or a row
without its caption or id, is a one-line error naming the row and the column.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from io import BytesIO
from pathlib import Path

from PIL import Image

from vltools.errors import VLToolsError, argument, input_error
from vltools.io.hf import Row, dataset_rows, image_source
from vltools.io.output import written_folder
from vltools.io.progress import log, progress
from vltools.io.records import check_converted, id_file_name, write_records
from vltools.io.sources import record_unique
from vltools.vision.images import IMAGE_EXTENSIONS, BadImage, load_rgb

FILES = ("images", "images.jsonl", "captions.jsonl")
FORMAT_SUFFIXES = {"JPEG": ".jpg", "PNG": ".png", "GIF": ".gif", "BMP": ".bmp", "TIFF": ".tif", "WEBP": ".webp"}


def _is_converted(folder: Path) -> bool:
    """Whether `folder` holds only what `convert hf` writes (so that `force` may replace it)."""
    return {path.name for path in folder.iterdir()} <= set(FILES)


def _image_bytes(row: Row) -> bytes:
    """The encoded bytes of `row`'s image, checked to decode; else a one-line error naming the row and column."""
    where = (row.image.part.name, row.image.where)
    try:
        source = image_source(row.image)
        data = source if isinstance(source, bytes) else source.read_bytes()
        load_rgb(data)
    except ValueError as exc:
        raise input_error(*where, str(exc), "fix or drop that row") from None
    except OSError as exc:
        raise input_error(*where, f"cannot read the image file {exc.filename} ({exc.strerror or exc})",
                          f"give {argument('image_root')}, the folder its paths are under") from None
    except BadImage as exc:
        raise input_error(*where, f"the image does not decode ({exc})", "fix or drop that row") from None
    return data


def _file_name(image_id: str, data: bytes, taken: set[str]) -> str:
    """The file name of an image under `images/`: its id (path separators as `_`), with its format's extension
    when the id has none, numbered when another id already gave that name."""
    suffix = "" if Path(image_id).suffix.lower() in IMAGE_EXTENSIONS else None
    if suffix is None:
        with Image.open(BytesIO(data)) as image:
            suffix = FORMAT_SUFFIXES.get(image.format, f".{str(image.format).lower()}")
    name = id_file_name([image_id], suffix)
    stem, ext = os.path.splitext(name)
    number = 1
    while name in taken:
        name, number = f"{stem}-{number}{ext}", number + 1
    taken.add(name)
    return name


def convert_hf(source: str | os.PathLike, output: str | os.PathLike, image_column: str | Sequence[str] = (),
               caption_column: str | None = None, id_column: str | None = None, split_column: str | None = None,
               image_root: str | os.PathLike | None = None, force: bool = False) -> dict[str, int]:
    """Write the images and captions of the dataset at `source` into the new folder `output` (replacing an earlier
    one only with `force`); the columns are auto-detected unless named (vltools.io.hf.columns; `image_column`: one
    column, or text columns joined as a path); returns the counts
    {"images", "captions"}. Rows of one id (a row per caption) give one image, its first row's, and all their
    captions, in row order; their splits must agree."""
    images: dict[str, dict] = {}
    first_rows: dict[str, str] = {}
    counts: dict[str, int] = {}
    captions, seen_captions, taken = [], {}, set()
    image_column = (image_column,) if isinstance(image_column, str) else tuple(image_column)
    rows = dataset_rows(source, image_column, caption_column, id_column, split_column, image_root)
    with written_folder(output, force, _is_converted, "converted dataset",
                        "only images/, images.jsonl, captions.jsonl") as staging:
        (staging / "images").mkdir()
        for row in progress(rows, desc="convert hf", unit="rows"):
            part, where = row.image.part.name, f"row {row.image.row}"
            if row.image_id not in images:
                data = _image_bytes(row)
                name = _file_name(row.image_id, data, taken)
                (staging / "images" / name).write_bytes(data)
                record = {"image_id": row.image_id, "path": f"images/{name}"}
                if row.split is not None:
                    record["split"] = row.split
                images[row.image_id] = check_converted(record, "images", part, where)
                first_rows[row.image_id] = f"{part}: {where}"
            elif images[row.image_id].get("split") != row.split:
                raise input_error(part, where, f"image {row.image_id!r} is in split {row.split!r} here but in "
                                  f"{images[row.image_id].get('split')!r} on {first_rows[row.image_id]}",
                                  "give each image one split")
            for text, given in zip(row.captions, row.caption_ids, strict=True):
                k = counts.get(row.image_id, 0)
                counts[row.image_id] = k + 1
                caption_id = given if given is not None else f"{row.image_id}#{k}"
                record_unique(seen_captions, caption_id, f"{part}: {where}", part, where,
                              f"caption id {caption_id!r}", "caption ids (sentids) must be unique")
                record = {"image_id": row.image_id, "caption": text, "caption_id": caption_id}
                if row.split is not None:
                    record["split"] = row.split
                captions.append(check_converted(record, "captions", part, where))
        if not captions:
            raise VLToolsError(f"{source}: no captions in any row; give {argument('caption_column')} the column of "
                               "captions")
        write_records(staging / "images.jsonl", images.values())
        write_records(staging / "captions.jsonl", captions)
    if without := len(images) - len(counts):
        log.warning("%s: %d of %d images have no caption", source, without, len(images))
    return {"images": len(images), "captions": len(captions)}

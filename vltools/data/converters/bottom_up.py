"""Bottom-up attention features (Anderson et al. 2018) -> features HDF5.

Two layouts: the TSV of the original release and of LXMERT (one image a row; boxes and features are base64
of float32 arrays, num_boxes x 4 and num_boxes x D; csv's field size limit is raised for them), and a
folder of per-image `.npz` files (bottom-up-attention.pytorch: keys x (K x D, or D x K as some releases
store it), bbox (K x 4), num_bbox, image_h, image_w). Images with fewer regions than the widest are zero
padded and `/num_regions` records the true count.
"""

from __future__ import annotations

import base64
import binascii
import csv
import os
import sys
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vltools.errors import VLToolsError, argument, input_error
from vltools.io.features import FeaturesWriter
from vltools.io.output import written
from vltools.io.progress import log, progress
from vltools.io.sources import features_attrs

ANDERSON_FIELDS = ("image_id", "image_w", "image_h", "num_boxes", "boxes", "features")
LXMERT_FIELDS = ("img_id", "img_h", "img_w", "objects_id", "objects_conf", "attrs_id", "attrs_conf", "num_boxes",
                 "boxes", "features")
ALIASES = {"image_id": ("image_id", "img_id"), "image_h": ("image_h", "img_h"), "image_w": ("image_w", "img_w"),
           "num_boxes": ("num_boxes",), "boxes": ("boxes",), "features": ("features",)}
NPZ_KEYS = ("x", "bbox", "image_h", "image_w")


@dataclass
class Detection:
    """One image's detector output: regions (K x D float32), boxes (K x 4, x1 y1 x2 y2), size (h, w)."""

    image_id: str
    regions: np.ndarray
    boxes: np.ndarray
    image_size: tuple[int, int]
    where: str


def resolve_fields(fields: Sequence[str]) -> dict[str, str]:
    """Map each needed field (image_id, image_h, image_w, num_boxes, boxes, features) to its TSV column name."""
    columns = {}
    for name, names in ALIASES.items():
        found = [column for column in fields if column in names]
        if len(found) != 1:
            raise VLToolsError(f"{argument('fields', ','.join(fields))}: needs exactly one of {' / '.join(names)}")
        columns[name] = found[0]
    if len(set(fields)) != len(fields):
        raise VLToolsError(f"{argument('fields', ','.join(fields))}: a field is named twice")
    return columns


def _tsv_rows(paths: Sequence[str | os.PathLike], fields: Sequence[str]) -> Iterator[tuple[dict, str, Path]]:
    """(row as {field: text}, "line N", path) for every row of the TSV files."""
    limit = sys.maxsize
    while True:
        try:
            csv.field_size_limit(limit)
            break
        except OverflowError:
            limit //= 2
    for path in map(Path, paths):
        if not path.is_file():
            raise VLToolsError(f"{path}: no such file")
        with open(path, encoding="ascii", newline="") as stream:
            reader = csv.reader(stream, delimiter="\t")
            try:
                for row in reader:
                    where = f"line {reader.line_num}"
                    if not row:
                        continue
                    if len(row) != len(fields):
                        raise input_error(path, where, f"{len(row)} columns instead of {len(fields)} "
                                          f"({','.join(fields)})",
                                          f"give the TSV's column names with {argument('fields')}")
                    yield dict(zip(fields, row, strict=True)), where, path
            except UnicodeDecodeError as exc:
                raise input_error(path, f"line {reader.line_num + 1}", f"not a bottom-up TSV ({exc.reason})") from None
            except csv.Error as exc:
                raise input_error(path, f"line {reader.line_num}", f"malformed TSV ({exc})") from None


def _integer(text: str, name: str, path: object, where: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise input_error(path, where, f"{name} is {text[:30]!r}, not an integer") from None


def _decode_array(text: str, rows: int, name: str, path: object, where: str) -> np.ndarray:
    """A base64 float32 array of `rows` rows."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise input_error(path, where, f"{name} is not valid base64") from None
    if rows == 0:
        if raw:
            raise input_error(path, where, f"{name} has data but num_boxes is 0")
        return np.zeros((0, 0), np.float32)
    if len(raw) % (4 * rows):
        raise input_error(path, where, f"{name} holds {len(raw)} bytes, not a whole float32 array of {rows} rows",
                          "check num_boxes and that the file is float32 bottom-up output")
    return np.frombuffer(raw, dtype=np.float32).reshape(rows, -1)


def iter_tsv(paths: Sequence[str | os.PathLike], fields: Sequence[str] = ANDERSON_FIELDS) -> Iterator[Detection]:
    """Decode each row of bottom-up TSV files."""
    columns = resolve_fields(fields)
    for row, where, path in _tsv_rows(paths, fields):
        count = _integer(row[columns["num_boxes"]], "num_boxes", path, where)
        boxes = _decode_array(row[columns["boxes"]], count, "boxes", path, where)
        if count and boxes.shape[1] != 4:
            raise input_error(path, where, f"boxes has {boxes.shape[1]} numbers per box, not 4")
        regions = _decode_array(row[columns["features"]], count, "features", path, where)
        size = (_integer(row[columns["image_h"]], "image_h", path, where),
                _integer(row[columns["image_w"]], "image_w", path, where))
        yield Detection(row[columns["image_id"]], regions, boxes.reshape(count, 4), size, f"{path}: {where}")


def tsv_counts(paths: Sequence[str | os.PathLike],
               fields: Sequence[str] = ANDERSON_FIELDS) -> list[tuple[str, int, str]]:
    """(image id, number of boxes, where) of every row, without decoding the arrays."""
    columns = resolve_fields(fields)
    return [(row[columns["image_id"]], _integer(row[columns["num_boxes"]], "num_boxes", path, where),
             f"{path}: {where}") for row, where, path in _tsv_rows(paths, fields)]


def npz_files(folder: str | os.PathLike) -> list[Path]:
    """The `.npz` files of a folder, sorted by name (the image id is the file name without `.npz`)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise VLToolsError(f"{folder}: no such folder")
    files = sorted(folder.glob("*.npz"))
    if not files:
        raise VLToolsError(f"{folder}: no .npz files")
    return files


def _npz_array(path: Path, key: str) -> np.ndarray:
    try:
        with np.load(path, allow_pickle=False) as data:
            if key not in data.files:
                raise input_error(path, None, f"no '{key}' array (has {', '.join(data.files)})",
                                  f"bottom-up .npz files hold {', '.join(NPZ_KEYS)}")
            return data[key]
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise input_error(path, None, f"not a readable .npz file ({exc})") from None


def read_npz(path: Path) -> Detection:
    """One per-image `.npz`; x is transposed when stored D x K."""
    boxes = _npz_array(path, "bbox")
    regions = _npz_array(path, "x")
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise input_error(path, None, f"bbox has shape {boxes.shape}, expected K x 4")
    count = boxes.shape[0]
    if regions.ndim != 2 or count not in regions.shape:
        raise input_error(path, None, f"x has shape {regions.shape}, expected {count} x D or D x {count} "
                          f"for the {count} boxes")
    if regions.shape[0] != count:
        regions = regions.T
    size = (int(_npz_array(path, "image_h")), int(_npz_array(path, "image_w")))
    return Detection(path.stem, regions.astype(np.float32, copy=False), boxes.astype(np.float32, copy=False), size,
                     str(path))


def npz_counts(folder: str | os.PathLike) -> list[tuple[str, int, str]]:
    """(image id, number of boxes, path) of every `.npz`, reading only the boxes."""
    return [(path.stem, int(_npz_array(path, "bbox").shape[0]), str(path)) for path in npz_files(folder)]


def iter_npz(folder: str | os.PathLike) -> Iterator[Detection]:
    """Read each `.npz` of a folder in name order."""
    for path in npz_files(folder):
        yield read_npz(path)


def check_counts(counts: Sequence[tuple[str, int, str]]) -> None:
    """Image ids must be unique across the inputs."""
    seen: dict[str, str] = {}
    for image_id, _, where in counts:
        if image_id in seen:
            raise VLToolsError(f"{where}: image id {image_id!r} repeats {seen[image_id]}; ids must be unique")
        seen[image_id] = where


def write_detections(detections: Iterable[Detection], counts: Sequence[int], path: str | os.PathLike,
                     attrs: dict[str, object], max_regions: int | None = None, dtype: str = "float32",
                     batch_size: int = 64) -> None:
    """Write detections to a features file, zero padded to `max_regions` (default: the most boxes of any
    image; extra boxes beyond it are dropped, keeping the first, highest-scoring ones)."""
    width = max_regions or max(counts)
    varying = any(min(count, width) != width for count in counts)
    dim = None
    with FeaturesWriter(path, attrs, dtype=dtype) as writer:
        batch: list[Detection] = []

        def flush() -> None:
            nonlocal dim
            regions = np.zeros((len(batch), width, dim), np.float32)
            boxes = np.zeros((len(batch), width, 4), np.float32)
            kept = np.zeros(len(batch), np.int32)
            for row, detection in enumerate(batch):
                kept[row] = min(len(detection.boxes), width)
                regions[row, :kept[row]] = detection.regions[:kept[row]]
                boxes[row, :kept[row]] = detection.boxes[:kept[row]]
            arrays = {"regions": regions, "boxes": boxes,
                      "image_size": np.array([d.image_size for d in batch], np.int32)}
            if varying:
                arrays["num_regions"] = kept
            writer.add([d.image_id for d in batch], **arrays)
            batch.clear()

        for detection in progress(detections, total=len(counts), desc="bottom-up features", unit="images"):
            if len(detection.boxes):
                if dim is None:
                    dim = detection.regions.shape[1]
                elif detection.regions.shape[1] != dim:
                    raise VLToolsError(f"{detection.where}: features have {detection.regions.shape[1]} dimensions, "
                                       f"earlier images {dim}; all images need the same size")
            batch.append(detection)
            if len(batch) == batch_size and dim is not None:
                flush()
        if batch:
            if dim is None:
                raise VLToolsError(f"{batch[0].where}: no image has any box, so the feature size is unknown")
            flush()


def convert_bottom_up(inputs: Sequence[str | os.PathLike], output: str | os.PathLike | None,
                      fields: str | Sequence[str] = ANDERSON_FIELDS, max_regions: int | None = None,
                      dtype: str = "float32") -> dict[str, int]:
    """`vltools convert bottom-up`: TSV files (columns `fields`: names, or one comma-separated string), or one
    folder of `.npz` files, as a features file written atomically to `output` (None: standard output); returns
    {"images": how many}."""
    if isinstance(fields, str):
        fields = [name.strip() for name in fields.split(",") if name.strip()]
    if len(inputs) == 1 and Path(inputs[0]).is_dir():
        counts, detections = npz_counts(inputs[0]), iter_npz(inputs[0])
    else:
        if any(Path(item).is_dir() for item in inputs):
            raise VLToolsError("give either one folder of .npz files or one or more TSV files, not both")
        counts, detections = tsv_counts(inputs, fields), iter_tsv(inputs, fields)
    if not counts:
        raise VLToolsError(f"{', '.join(map(str, inputs))}: no images")
    check_counts(counts)
    numbers = [count for _, count, _ in counts]
    if max_regions is None and len(set(numbers)) > 1:
        log.info("images have %d to %d boxes: padding to %d, /num_regions keeps the counts",
                 min(numbers), max(numbers), max(numbers))
    attrs = features_attrs("bottom-up", "detector", ", ".join(map(str, inputs)))
    with written(output) as path:
        write_detections(detections, numbers, path, attrs, max_regions, dtype)
    return {"images": len(counts)}

"""SCAN / VSE++ / SGRAF "precomp" data: `{split}_ims.npy` + `{split}_caps.txt` (+ ids) <-> vltools files.

The precomp layout: `{split}_ims.npy` holds N images (N x K x D regions, or N x D global vectors),
`{split}_caps.txt` one caption a line with the captions of one image on consecutive lines (5 per image
in the published data, sometimes 1), and optionally `{split}_ids.txt` or `{split}_imagename.txt` naming
the images (one line per image, or one per caption repeated over an image's lines).
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vltools.errors import ArgumentError, VLToolsError, argument, input_error
from vltools.io.features import FeaturesReader, FeaturesWriter
from vltools.io.output import check_parent, is_stdout, written
from vltools.io.progress import log, progress
from vltools.io.records import check_converted, iter_records, write_records
from vltools.io.sources import features_attrs, numbered_lines

CHUNK_BYTES = 64 << 20
ID_SUFFIXES = ("ids", "imagename")
EXPORT_FIELDS = ("regions", "global")   # the features datasets to-precomp exports


@dataclass(frozen=True)
class PrecompFiles:
    """The files of one precomp split; `images` and `ids` may be absent."""

    captions: Path
    images: Path | None
    ids: Path | None


def find_precomp_files(directory: str | os.PathLike, split: str, ids: str | os.PathLike | None = None) -> PrecompFiles:
    """Locate `{split}_caps.txt`, `{split}_ims.npy` and `{split}_ids.txt` / `{split}_imagename.txt` in `directory`."""
    folder = Path(directory)
    if not folder.is_dir():
        raise VLToolsError(f"{folder}: no such folder; give the folder holding {split}_caps.txt and {split}_ims.npy")
    captions = folder / f"{split}_caps.txt"
    if not captions.is_file():
        raise VLToolsError(f"{captions}: no such file; check {argument('split')} (the folder has "
                           f"{', '.join(sorted(p.name for p in folder.glob('*_caps.txt'))) or 'no *_caps.txt'})")
    images = folder / f"{split}_ims.npy"
    if ids is None:
        found = [folder / f"{split}_{suffix}.txt" for suffix in ID_SUFFIXES]
        ids = next((p for p in found if p.is_file()), None)
    return PrecompFiles(captions, images if images.is_file() else None, Path(ids) if ids is not None else None)


def open_precomp_images(path: str | os.PathLike) -> np.ndarray:
    """Memory-map an `_ims.npy` (N x K x D regions or N x D vectors) without reading it."""
    try:
        images = np.load(path, mmap_mode="r", allow_pickle=False)
    except FileNotFoundError:
        raise VLToolsError(f"{path}: no such file") from None
    except (ValueError, OSError) as exc:
        raise input_error(path, None, f"not a readable .npy array ({exc})", "give the precomp *_ims.npy file") from None
    if images.ndim not in (2, 3) or images.shape[0] == 0 or not np.issubdtype(images.dtype, np.floating):
        raise input_error(path, None, f"expected a float array N x K x D or N x D, found {images.dtype} "
                          f"{tuple(images.shape)}", "give the precomp *_ims.npy file")
    return images


def read_precomp_captions(path: str | os.PathLike) -> list[str]:
    """The captions of a `_caps.txt`, one a line, stripped as SCAN strips them; blank lines inside are errors."""
    lines = [(number, text.strip()) for number, text in numbered_lines(path)]
    while lines and not lines[-1][1]:
        lines.pop()
    if not lines:
        raise input_error(path, None, "empty file: no captions", "give the precomp *_caps.txt file")
    for number, text in lines:
        if not text:
            raise input_error(path, f"line {number}", "blank caption line",
                              "the captions of an image must be on consecutive lines; remove or fill that line")
    return [text for _, text in lines]


def captions_per_image(n_captions: int, n_images: int, captions_path: object, images_source: object) -> int:
    """How many consecutive caption lines belong to each image; the line count must divide evenly."""
    if n_images <= 0 or n_captions % n_images or n_captions < n_images:
        raise input_error(captions_path, None, f"{n_captions} caption lines for {n_images} images "
                          f"({images_source}): not a whole number of captions per image",
                          "check that the caption file and the images belong to the same split")
    return n_captions // n_images


def read_precomp_ids(path: str | os.PathLike, n_images: int, per_image: int) -> list[str]:
    """Image ids from an ids / imagename file: one line per image, or one per caption (constant per image)."""
    lines = [(number, text.strip()) for number, text in numbered_lines(path)]
    while lines and not lines[-1][1]:
        lines.pop()
    blank = next((number for number, text in lines if not text), None)
    if blank is not None:
        raise input_error(path, f"line {blank}", "blank image id", "give one id per line")
    if len(lines) == n_images:
        ids = [text for _, text in lines]
    elif len(lines) == n_images * per_image:
        ids = []
        for start in range(0, len(lines), per_image):
            group = lines[start:start + per_image]
            first = group[0][1]
            odd = next((entry for entry in group if entry[1] != first), None)
            if odd is not None:
                raise input_error(path, f"line {odd[0]}", f"id {odd[1]!r} differs from {first!r} on line {group[0][0]}",
                                  f"give {n_images} lines (one per image) or {len(lines)} repeating each "
                                  f"image's id on its {per_image} caption lines")
            ids.append(first)
    else:
        raise input_error(path, None, f"{len(lines)} lines for {n_images} images of {per_image} captions each",
                          f"give {n_images} lines (one per image) or {n_images * per_image} (one per caption)")
    repeated = next((image_id for image_id, n in Counter(ids).items() if n > 1), None)
    if repeated is not None:
        raise input_error(path, None, f"image id {repeated!r} names two images", "image ids must be unique")
    return ids


def count_id_runs(path: str | os.PathLike) -> int:
    """How many images an ids file names: its runs of equal consecutive lines (one line or one per caption)."""
    ids = [text.strip() for _, text in numbered_lines(path) if text.strip()]
    return sum(1 for i, image_id in enumerate(ids) if i == 0 or image_id != ids[i - 1])


def precomp_caption_records(captions: Sequence[str], image_ids: Sequence[str], split: str,
                            source: object) -> list[dict]:
    """Captions JSONL records: caption line i belongs to image i // per_image; caption_id = `{image_id}#{k}`.
    Each is checked as a captions record, naming its line of `source` (the _caps.txt)."""
    per_image = len(captions) // len(image_ids)
    return [check_converted({"image_id": image_ids[i // per_image], "caption": caption, "split": split,
                             "caption_id": f"{image_ids[i // per_image]}#{i % per_image}"}, "captions", source,
                            f"line {i + 1}") for i, caption in enumerate(captions)]


@dataclass
class PrecompSplit:
    """One precomp split read and checked: image ids, caption records, and the memory-mapped images."""

    files: PrecompFiles
    image_ids: list[str]
    records: list[dict]
    images: np.ndarray | None


def read_precomp(directory: str | os.PathLike, split: str, ids: str | os.PathLike | None = None,
                 per_image: int | None = None) -> PrecompSplit:
    """Read and cross-check a precomp split; without `_ims.npy`, the image count comes from the ids file
    or from `per_image`."""
    files = find_precomp_files(directory, split, ids)
    captions = read_precomp_captions(files.captions)
    images = open_precomp_images(files.images) if files.images is not None else None
    if images is not None:
        n_images, source = images.shape[0], files.images
    elif files.ids is not None and per_image is None:
        n_images, source = count_id_runs(files.ids), files.ids
    elif per_image is not None:
        n_images, source = len(captions) // per_image, argument("captions_per_image", str(per_image))
    else:
        raise VLToolsError(f"{Path(directory) / f'{split}_ims.npy'}: no such file, and no ids file to count the "
                           f"images; give {argument('captions_per_image', 'N')}")
    count = captions_per_image(len(captions), n_images, files.captions, source)
    if per_image is not None and count != per_image:
        raise input_error(files.captions, None, f"{len(captions)} lines make {count} captions for each of "
                          f"{n_images} images, not {per_image}", f"drop {argument('captions_per_image')} or fix it")
    if files.ids is not None:
        image_ids = read_precomp_ids(files.ids, n_images, count)
    else:
        image_ids = [f"{split}_{index}" for index in range(n_images)]
    return PrecompSplit(files, image_ids, precomp_caption_records(captions, image_ids, split, files.captions), images)


def write_precomp_features(images: np.ndarray, image_ids: Sequence[str], path: str | os.PathLike, source: object,
                           dtype: str = "float32", chunk_bytes: int = CHUNK_BYTES) -> None:
    """Copy memory-mapped precomp images to a features file a chunk of rows at a time.

    N x K x D arrays become `/regions`, N x D arrays `/global`.
    """
    name = "regions" if images.ndim == 3 else "global"
    row_bytes = int(np.prod(images.shape[1:])) * images.dtype.itemsize
    rows = max(1, chunk_bytes // max(row_bytes, 1))
    attrs = features_attrs("precomp", "precomp", source)
    with FeaturesWriter(path, attrs, dtype=dtype) as writer:
        for start in progress(range(0, len(image_ids), rows), total=-(-len(image_ids) // rows),
                              desc="precomp features", unit="chunks"):
            block = np.asarray(images[start:start + rows])
            writer.add(image_ids[start:start + rows], **{name: block})


def convert_precomp(directory: str | os.PathLike, split: str, features: str | os.PathLike | None = None,
                    captions: str | os.PathLike | None = None, ids_file: str | os.PathLike | None = None,
                    captions_per_image: int | None = None, dtype: str = "float32") -> dict[str, int]:
    """`vltools convert precomp`: a precomp split as a features file (`features`) and / or a captions JSONL
    (`captions`), each written atomically ("-": standard output, for one of them); returns how many "images" and
    "captions" were written. Image ids come from `ids_file` (default: the split's ids or imagename file), else are
    `{split}_{index}`; caption ids are `{image_id}#{k}`."""
    if features is None and captions is None:
        raise ArgumentError("features", f"or {argument('captions')} must be given (or both): nothing to write")
    if features is not None and captions is not None and is_stdout(features) and is_stdout(captions):
        raise ArgumentError("features", f"and {argument('captions')} cannot both be standard output")
    data = read_precomp(directory, split, ids_file, captions_per_image)
    if features is None:
        return {"captions": write_records(captions, data.records)}
    if data.images is None:
        raise VLToolsError(f"{directory}: no {split}_ims.npy to convert to {argument('features')}")
    with written(features) as target:
        write_precomp_features(data.images, data.image_ids, target, data.files.images, dtype)
        counts = {"images": len(data.image_ids)}
        if captions is not None:
            counts["captions"] = write_records(captions, data.records)
    return counts


def group_captions(captions_path: str | os.PathLike, image_ids: Sequence[str],
                   features_path: object) -> list[list[str]]:
    """The captions of each image of `image_ids` (input order within an image); every image needs the same
    number. Captions of images outside `image_ids` are skipped (logged)."""
    grouped: dict[str, list[str]] = {image_id: [] for image_id in image_ids}
    skipped = 0
    for record in iter_records(captions_path, "captions"):
        if record["image_id"] in grouped:
            grouped[record["image_id"]].append(record["caption"])
        else:
            skipped += 1
    if skipped:
        log.info("%s: skipped %d captions of images not in %s", captions_path, skipped, features_path)
    per_image = Counter(len(captions) for captions in grouped.values()).most_common(1)[0][0]
    for image_id, captions in grouped.items():
        if not captions:
            raise input_error(captions_path, None, f"image {image_id!r} of {features_path} has no caption",
                              "every image needs its captions")
        if len(captions) != per_image:
            raise input_error(captions_path, None, f"image {image_id!r} has {len(captions)} captions, most images "
                              f"have {per_image}", "precomp needs the same number for every image")
        if any("\n" in caption for caption in captions):
            raise input_error(captions_path, None, f"a caption of image {image_id!r} contains a line break",
                              "precomp stores one caption a line; remove the line break")
    return [grouped[image_id] for image_id in image_ids]


def write_precomp(features: str | os.PathLike, captions: str | os.PathLike, out_dir: str | os.PathLike,
                  split: str, field: str | None = None, chunk_bytes: int = CHUNK_BYTES) -> dict[str, object]:
    """`vltools convert to-precomp`: write `{split}_ims.npy` (float32), `{split}_caps.txt` and `{split}_ids.txt`
    in `out_dir`, in the order of the features' ids; all three land together or none does. `field`: the
    features dataset to export (default: regions if present, else global). Returns how many "images" and
    "captions" were written and the "files" (paths)."""
    out = Path(out_dir)
    with FeaturesReader(features) as reader:
        image_ids = list(reader.ids)
        if not image_ids:
            raise VLToolsError(f"{features}: no images")
        field = field or next((name for name in EXPORT_FIELDS if name in reader.fields), None)
        if field is None or field not in reader.fields:
            raise VLToolsError(f"{features}: no /{field or 'regions or /global'} dataset to export; "
                               "precomp needs region features or global vectors")
        if field == "regions" and "num_regions" in reader.fields:
            counts = reader.handle["num_regions"][:]
            if (counts < reader.shape("regions")[1]).any():
                log.warning("%s: %d images have fewer regions than %d; their zero padding rows go into the "
                            "precomp array, which has no mask", features,
                            int((counts < reader.shape("regions")[1]).sum()), reader.shape("regions")[1])
        grouped = group_captions(captions, image_ids, features)
        paths = {name: out / f"{split}_{name}.{ext}" for name, ext in (("ims", "npy"), ("caps", "txt"), ("ids", "txt"))}
        check_parent(out)
        out.mkdir(exist_ok=True)
        shape = reader.shape(field)
        rows = max(1, chunk_bytes // max(int(np.prod(shape[1:])) * 4, 1))
        with contextlib.ExitStack() as stack:
            temps = {name: stack.enter_context(written(path)) for name, path in paths.items()}
            with open(temps["ims"], "wb") as stream:
                header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False,
                          "shape": shape}
                np.lib.format.write_array_header_1_0(stream, header)
                for start in progress(range(0, len(image_ids), rows), total=-(-len(image_ids) // rows),
                                      desc="precomp export", unit="chunks"):
                    block = reader.read_range(field, start, start + rows)
                    stream.write(block.astype(np.float32, copy=False).tobytes())
            with open(temps["caps"], "w", encoding="utf-8", newline="\n") as stream:
                stream.writelines(f"{caption}\n" for texts in grouped for caption in texts)
            with open(temps["ids"], "w", encoding="utf-8", newline="\n") as stream:
                stream.writelines(f"{image_id}\n" for image_id in image_ids)
    return {"images": len(image_ids), "captions": sum(map(len, grouped)), "files": [str(p) for p in paths.values()]}

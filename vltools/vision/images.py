"""Image input for the vision stages: listing inputs, robust decoding to RGB, and a dataset of items.

Decoding never raises for a bad image: it returns the reason, so a run can skip, count and record
broken files (zero-byte, truncated, corrupt, not an image, decompression bombs) and go on.
"""

from __future__ import annotations

import codecs
import functools
import io
import math
import os
import tarfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps, UnidentifiedImageError

from vltools.errors import VLToolsError, input_error, require_file
from vltools.io.bounded import member_bytes
from vltools.io.hf import ImageCell, dataset_rows, image_source, is_dataset_folder, parquet_files
from vltools.io.ids import escaped_id, id_problem
from vltools.io.progress import log
from vltools.io.records import iter_records
from vltools.vision.limits import DEFAULT_MAX_PIXELS, MAX_PIXELS_LIMIT
from vltools.vision.masks import load_mask

IMAGE_EXTENSIONS = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pbm"}
EXIF_ORIENTATION = 0x0112
SWAPPING_ORIENTATIONS = (5, 6, 7, 8)  # EXIF orientations that rotate by 90 degrees
RESIZE_MODES = ("shorter", "square", "longer")
ACCEPTED = ("an image folder, image files, an uncompressed tar of images, a text list of image paths, an images "
            "JSONL or a Hugging Face dataset (save_to_disk folder or parquet)")
HEAD_BYTES = 1 << 16  # bytes read to tell a text list from a binary file
COMPRESSED_MAGIC = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd")  # gzip, bzip2, xz, zstd
PARQUET_MAGIC = b"PAR1"


@dataclass(frozen=True)
class TarMember:
    """Where an image lies inside an uncompressed tar archive: its member name and its bytes' offset and size,
    so that any process reads it by one seek, without scanning the archive."""

    name: str
    offset: int
    size: int


@dataclass(frozen=True)
class ImageItem:
    """One input image: its id (a string), its file (or the folder or tar archive holding it, with `member`, or the
    Hugging Face dataset holding it, with `cell`), and optional boxes in original-image pixels. `problem`: why an
    image found in a folder or a tar archive cannot be used though it was listed (its name is no usable id, or its
    member overruns the archive); it then fails to load like a corrupt image: skipped, counted and recorded, fatal
    with --strict."""

    image_id: str
    path: Path
    boxes: tuple[tuple[float, float, float, float], ...] | None = None
    member: TarMember | None = None
    problem: str | None = None
    cell: ImageCell | None = None


class BadImage(Exception):
    """An image that cannot be used; the message is the reason recorded in `/failed`."""


def _contained_item(name: str, path: Path, container: Path, member: TarMember | None = None) -> ImageItem:
    """The item of an image at `path` that the folder or tar archive `container` holds under `name`: a name that is
    no usable id (vltools.io.ids) becomes its escaped form, the item names the container (messages stay on one
    line) and fails to load."""
    problem = id_problem(name)
    if problem is None:
        return ImageItem(name, path, member=member)
    return ImageItem(escaped_id(name), container, member=member,
                     problem=f"its name {problem}, which an id cannot: rename it")


def _folder_items(folder: Path) -> list[ImageItem]:
    # broken or looping symlinks with an image extension are kept: they fail to load, and so are reported
    # (recorded in /failed, or fatal with --strict) instead of silently missing; so are files whose names are no ids
    files = [p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS
             and (p.is_file() or (p.is_symlink() and not p.exists()))]
    items = [_contained_item(p.relative_to(folder).as_posix(), p, folder) for p in files]
    return sorted(items, key=lambda item: item.image_id)


def _named_id(name: str, path: object, where: str | None) -> str:
    """`name`, an id the user gave (an image file's name, a line of a list), or a one-line error naming `path`
    and `where` when it is no usable id (vltools.io.ids)."""
    problem = id_problem(name)
    if problem is not None:
        raise input_error(path, where, f"image name {escaped_id(name)!r} {problem}, which an id cannot",
                          "rename the file")
    return name


def _list_items(list_file: Path) -> list[ImageItem]:
    items = []
    with open(list_file, encoding="utf-8-sig", errors="surrogateescape") as stream:
        for number, line in enumerate(stream, 1):
            name = line.strip()
            if name:
                path = Path(name) if os.path.isabs(name) else list_file.parent / name
                items.append(ImageItem(_named_id(name, list_file, f"line {number}"), path))
    return items


def _jsonl_items(jsonl: Path) -> list[ImageItem]:
    items = []
    for record in iter_records(jsonl, "images"):
        path = Path(record["path"])
        boxes = record.get("boxes")
        items.append(ImageItem(record["image_id"], path if path.is_absolute() else jsonl.parent / path,
                               tuple(tuple(float(v) for v in box) for box in boxes) if boxes is not None else None))
    return items


def _tar_items(archive: Path) -> list[ImageItem]:
    """The image members of an uncompressed tar (a webdataset / img2dataset shard: `key.jpg` beside `key.txt`
    and `key.json`, which are not images and are skipped); ids are the member names, in archive order."""
    try:
        tar = tarfile.open(archive, "r:")
    except tarfile.ReadError as exc:
        raise input_error(archive, None, f"not a readable tar archive ({exc})",
                          "give an uncompressed .tar of images") from None
    items = []
    with tar:
        try:
            for info in tar:
                if info.isreg() and Path(info.name).suffix.lower() in IMAGE_EXTENSIONS:
                    member = TarMember(info.name, info.offset_data, info.size)
                    items.append(_contained_item(info.name, archive, archive, member))
        except tarfile.ReadError as exc:  # a download cut short: its members so far are used, the cut one fails
            log.warning("%s: truncated tar archive (%s); the images after its last complete header are missing",
                        archive, exc)
    if not items:
        raise input_error(archive, None, "no image members in this tar archive",
                          f"give a tar holding {', '.join(sorted(IMAGE_EXTENSIONS))} files")
    return items


def _dataset_items(path: Path) -> list[ImageItem]:
    """The images of a Hugging Face dataset (vltools.io.hf: its image and id columns as the known layouts have
    them), in row order; an id on several rows (a row per caption) is the image of its first row."""
    items: dict[str, ImageItem] = {}
    for row in dataset_rows(path, captions=False):
        items.setdefault(row.image_id, ImageItem(row.image_id, row.image.part.source, cell=row.image))
    if not items:
        raise input_error(path, None, "no rows in this dataset", "give a dataset of images")
    return list(items.values())


def _head(path: Path) -> bytes:
    with open(path, "rb") as stream:
        return stream.read(HEAD_BYTES)


def _text(head: bytes) -> str | None:
    """`head` as text when it is UTF-8 without NUL bytes (a multi-byte character cut at the end is allowed)."""
    if b"\0" in head:
        return None
    try:
        return codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return None


def _is_image(path: Path) -> bool:
    """Whether Pillow recognises the file's header as an image (for image files without an image extension)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path):
                return True
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        return False


def _file_items(path: Path) -> list[ImageItem]:
    """Items of one file argument, by its kind: an image (by extension, else by its header; id = file name), an
    `images` JSONL, a tar archive of images, or a text list of paths; anything else is a one-line error."""
    suffix = path.suffix.lower()
    if suffix in IMAGE_EXTENSIONS:
        return [ImageItem(_named_id(path.name, escaped_id(str(path)), None), path)]
    if suffix in (".jsonl", ".json"):
        return _jsonl_items(path)
    head = _head(path)
    if head.startswith(PARQUET_MAGIC):
        return _dataset_items(path)
    text = _text(head)
    if text is not None:
        return _jsonl_items(path) if text.lstrip("\ufeff").lstrip().startswith("{") else _list_items(path)
    if head.startswith(COMPRESSED_MAGIC):
        raise input_error(path, None, "a compressed file; vltools reads uncompressed tar archives of images",
                          "decompress it first (gunzip, bunzip2, unxz or unzstd)")
    if tarfile.is_tarfile(path):
        return _tar_items(path)
    if _is_image(path):
        return [ImageItem(_named_id(path.name, escaped_id(str(path)), None), path)]
    raise input_error(path, None, "not an input vltools reads", f"give {ACCEPTED}")


def list_inputs(inputs: Sequence[str | os.PathLike]) -> list[ImageItem]:
    """Items of every INPUT in order: a folder (recursive, ids = relative paths, sorted); an image file (id = its
    file name, as the folder holding it would give); an uncompressed tar archive (ids = member names, in archive
    order); a text file of paths (one a line, ids = the line, relative to the list's folder); an `images`
    JSONL; or a Hugging Face dataset (a save_to_disk folder, a parquet file, or a folder of parquet files and no
    images; ids from its id column, vltools.io.hf). Ids must be unique across all inputs."""
    items: list[ImageItem] = []
    for given in inputs:
        path = Path(given)
        if path.is_dir():
            found = _dataset_items(path) if is_dataset_folder(path) else _folder_items(path)
            if not found and parquet_files(path):
                found = _dataset_items(path)
            if not found:
                raise input_error(path, None, "no image files in this folder",
                                  f"give a folder with {', '.join(sorted(IMAGE_EXTENSIONS))} files")
            items.extend(found)
        elif path.is_file():
            items.extend(_file_items(path))
        else:  # not a folder nor a file: says what is there (a named pipe, a device) or that nothing is
            require_file(path, f"no such file or folder; give {ACCEPTED}", ACCEPTED)
    seen: set[str] = set()
    for item in items:
        if item.image_id in seen:
            raise VLToolsError(f"image id {item.image_id!r} appears twice in the inputs; ids must be unique (image "
                               "files given by name are known by their file name: give their folder instead)")
        seen.add(item.image_id)
    if not items:
        raise VLToolsError(f"{', '.join(map(str, inputs))}: no images listed")
    return items


def _to_rgb(image: Image.Image) -> Image.Image:
    """Any Pillow mode as 8-bit RGB: 16-bit and float images are rescaled, alpha is composited on white."""
    if image.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        array = np.asarray(image, dtype=np.float64)
        top = 65535.0 if image.mode.startswith("I;16") or array.max() > 255 else 255.0
        array = np.clip(array / top * 255.0 + 0.5, 0, 255).astype(np.uint8)
        image = Image.fromarray(array, mode="L")
    if image.mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    if image.mode in ("LA", "La", "PA", "RGBa"):
        image = image.convert("RGBA")
    if image.mode == "RGBA":
        background = Image.new("RGBA", image.size, (255, 255, 255, 255))
        image = Image.alpha_composite(background, image)
    return image.convert("RGB") if image.mode != "RGB" else image


def _member_bytes(item: ImageItem) -> bytes:
    """The bytes of a tar member image (bounded.member_bytes: a header claiming more than the archive holds is a
    BadImage before anything is allocated)."""
    member = item.member
    with open(item.path, "rb") as stream:
        try:
            return member_bytes(stream, escaped_id(member.name), member.offset, member.size)
        except ValueError as exc:
            raise BadImage(str(exc)) from None


def check_max_pixels(max_pixels: int) -> None:
    """Refuse a pixel limit outside [1, MAX_PIXELS_LIMIT]: a larger one lets an image ask for more memory than a
    decoder can be given (a MemoryError, not a skipped image)."""
    if not 1 <= max_pixels <= MAX_PIXELS_LIMIT:
        raise VLToolsError(f"max_pixels must be in [1, {MAX_PIXELS_LIMIT}], not {max_pixels}")


def load_rgb(source: Path | ImageItem | bytes, max_pixels: int = DEFAULT_MAX_PIXELS,
             plan: Callable[[int, int], tuple[int, int]] | None = None) -> tuple[Image.Image, tuple[int, int]]:
    """Decode an image file, an item (a file, a tar member or a dataset row's image) or an image's bytes upright
    (EXIF orientation applied) as RGB; return it and its original (h, w).

    `plan` maps the upright (h, w) to the size the image will be resized to; it lets JPEG decoding shrink
    by DCT scaling when the image is downsized anyway. The original size returned is always that of the
    full-resolution, upright image.
    Raises BadImage with the reason for anything unusable.
    """
    check_max_pixels(max_pixels)
    if isinstance(source, ImageItem) and source.problem is not None:
        raise BadImage(source.problem)
    if isinstance(source, ImageItem) and source.cell is not None:
        try:
            return _decoded(image_source(source.cell), max_pixels, plan)
        except OSError as exc:
            raise BadImage(f"{source.cell.where}: cannot read {exc.filename} ({exc.strerror or exc})") from None
        except (BadImage, ValueError) as exc:
            raise BadImage(f"{source.cell.where}: {exc}") from None
    if isinstance(source, ImageItem) and source.member is not None:
        return _decoded(_member_bytes(source), max_pixels, plan)
    return _decoded(source.path if isinstance(source, ImageItem) else source, max_pixels, plan)


def _decoded(source: Path | bytes, max_pixels: int,
             plan: Callable[[int, int], tuple[int, int]] | None) -> tuple[Image.Image, tuple[int, int]]:
    """`load_rgb` of an image file or an image's bytes."""
    if isinstance(source, bytes):
        opened, empty = io.BytesIO(source), not source
    else:
        opened, empty = source, source.stat().st_size == 0
    if empty:
        raise BadImage("empty file (0 bytes)")
    previous = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = max_pixels
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(opened) as image:
                w, h = image.size
                orientation = image.getexif().get(EXIF_ORIENTATION, 1)
                if orientation in SWAPPING_ORIENTATIONS:
                    h, w = w, h
                if plan is not None and image.format == "JPEG":
                    target = plan(h, w)
                    scale = max(target[0] / h, target[1] / w)
                    image.draft(image.mode, (math.ceil(image.size[0] * scale), math.ceil(image.size[1] * scale)))
                image.load()
                upright = ImageOps.exif_transpose(image)
                rgb = _to_rgb(upright)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise BadImage(f"too many pixels, possible decompression bomb ({exc})") from None
    except UnidentifiedImageError:
        raise BadImage("not an image file Pillow can read") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise BadImage(f"corrupt or truncated image ({exc})") from None
    finally:
        Image.MAX_IMAGE_PIXELS = previous
    return rgb, (h, w)


def read_item(item: ImageItem, max_pixels: int = DEFAULT_MAX_PIXELS,
              plan: Callable[[int, int], tuple[int, int]] | None = None) -> tuple[Image.Image, tuple[int, int]]:
    """`load_rgb` of `item`, a file that cannot be read (permissions, an I/O error) being a BadImage too."""
    try:
        return load_rgb(item, max_pixels, plan)
    except OSError as exc:
        raise BadImage(f"cannot read file ({exc.strerror or exc})") from None


def resized_shape(h: int, w: int, mode: str, size: int, max_size: int | None = None) -> tuple[int, int]:
    """The (h, w) an image is resized to: `shorter` side = size (long side capped at max_size),
    `square` = size x size, `longer` side = size."""
    if mode == "square":
        return size, size
    if mode == "shorter":
        scale = size / min(h, w)
        if max_size is not None and max(h, w) * scale > max_size:
            scale = max_size / max(h, w)
    elif mode == "longer":
        scale = size / max(h, w)
    else:
        raise ValueError(f"unknown resize mode {mode!r}")
    return max(1, round(h * scale)), max(1, round(w * scale))


def _to_tensor(image: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.asarray(image, dtype=np.uint8).copy()).permute(2, 0, 1).contiguous()


def ten_crops(image: Image.Image, size: int) -> torch.Tensor:
    """SCO's 10 crops: resize the shorter side to size * 8/7 (256 for 224), take the 4 corner and the
    centre size x size crops and their horizontal flips; (10, 3, size, size) uint8."""
    h, w = resized_shape(image.height, image.width, "shorter", round(size * 8 / 7))
    resized = image.resize((w, h), Image.BILINEAR)
    boxes = [(0, 0), (w - size, 0), (0, h - size), (w - size, h - size), ((w - size) // 2, (h - size) // 2)]
    crops = [resized.crop((x, y, x + size, y + size)) for x, y in boxes]
    crops += [crop.transpose(Image.FLIP_LEFT_RIGHT) for crop in crops]
    return torch.stack([_to_tensor(crop) for crop in crops])


class ImageDataset(torch.utils.data.Dataset):
    """Decodes and resizes items (in DataLoader workers); a bad image yields its failure reason instead.

    Each element is a dict: `index`, and either `error` or `image` (3, h, w) uint8, `orig_size` (h, w),
    plus `crops` (10, 3, s, s) uint8 when `ten_crop` is set and `mask` (H, W) float when `mask_dir` is set
    (a missing mask makes the item fail like a bad image).
    """

    def __init__(self, items: Sequence[ImageItem], resize: str, size: int, max_size: int | None = None,
                 ten_crop: int | None = None, max_pixels: int = DEFAULT_MAX_PIXELS,
                 mask_dir: Path | None = None) -> None:
        if resize not in RESIZE_MODES:
            raise ValueError(f"resize must be one of {RESIZE_MODES}")
        check_max_pixels(max_pixels)
        self.items = list(items)
        self.resize = resize
        self.size = size
        self.max_size = max_size
        self.ten_crop = ten_crop
        self.max_pixels = max_pixels
        self.mask_dir = mask_dir

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict:
        item = self.items[index]
        try:
            plan = None if self.ten_crop else functools.partial(resized_shape, mode=self.resize, size=self.size,
                                                                 max_size=self.max_size)
            image, (h, w) = read_item(item, self.max_pixels, plan)
            mask = load_mask(self.mask_dir, item.image_id) if self.mask_dir is not None else None
        except BadImage as exc:
            return {"index": index, "error": str(exc)}
        except OSError as exc:
            return {"index": index, "error": f"cannot read file ({exc.strerror or exc})"}
        problem = _mismatch(item, (h, w), mask)
        if problem:
            return {"index": index, "error": problem}
        th, tw = resized_shape(h, w, self.resize, self.size, self.max_size)
        out = {"index": index, "orig_size": (h, w), "image": _to_tensor(image.resize((tw, th), Image.BILINEAR))}
        if mask is not None:
            out["mask"] = mask
        if self.ten_crop:
            out["crops"] = ten_crops(image, self.ten_crop)
        return out


def _mismatch(item: ImageItem, size: tuple[int, int], mask: torch.Tensor | None) -> str | None:
    """Why `item`'s boxes or mask do not fit its image of `size` (h, w), or None when they do."""
    h, w = size
    if mask is not None and tuple(mask.shape) != (h, w):
        return (f"its mask is {mask.shape[1]}x{mask.shape[0]} but the image is {w}x{h}; masks must have the "
                "image's size")
    for box in item.boxes or ():
        if box[0] >= w or box[1] >= h or box[2] <= 0 or box[3] <= 0:
            return f"box {list(box)} lies wholly outside the {w}x{h} image; boxes are in original-image pixels"
    return None


def collate_items(batch: list[dict]) -> list[dict]:
    """Keep a batch as a list: images differ in size and some are failures."""
    return batch


"""Image input for the vision stages: listing inputs, robust decoding to RGB, and a dataset of items.

Decoding never raises for a bad image: it returns the reason, so a run can skip, count and record
broken files (zero-byte, truncated, corrupt, not an image, decompression bombs) and go on.
"""

from __future__ import annotations

import functools
import math
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps, UnidentifiedImageError

from vltools.errors import VLToolsError, input_error
from vltools.io.records import iter_records
from vltools.vision.masks import load_mask

IMAGE_EXTENSIONS = {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pbm"}
DEFAULT_MAX_PIXELS = 89_478_485  # Pillow's own decompression-bomb threshold
EXIF_ORIENTATION = 0x0112
SWAPPING_ORIENTATIONS = (5, 6, 7, 8)  # EXIF orientations that rotate by 90 degrees
RESIZE_MODES = ("shorter", "square", "longer")


@dataclass(frozen=True)
class ImageItem:
    """One input image: its id (a string), its file, and optional boxes in original-image pixels."""

    image_id: str
    path: Path
    boxes: tuple[tuple[float, float, float, float], ...] | None = None


class BadImage(Exception):
    """An image that cannot be used; the message is the reason recorded in `/failed`."""


def _folder_items(folder: Path) -> list[ImageItem]:
    # broken or looping symlinks with an image extension are kept: they fail to load, and so are reported
    # (recorded in /failed, or fatal with --strict) instead of silently missing
    files = [p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS
             and (p.is_file() or (p.is_symlink() and not p.exists()))]
    items = [ImageItem(p.relative_to(folder).as_posix(), p) for p in files]
    return sorted(items, key=lambda item: item.image_id)


def _list_items(list_file: Path) -> list[ImageItem]:
    items = []
    with open(list_file, encoding="utf-8") as stream:
        for line in stream:
            name = line.strip()
            if name:
                path = Path(name) if os.path.isabs(name) else list_file.parent / name
                items.append(ImageItem(name, path))
    return items


def _jsonl_items(jsonl: Path) -> list[ImageItem]:
    items = []
    for record in iter_records(jsonl, "images"):
        path = Path(record["path"])
        boxes = record.get("boxes")
        items.append(ImageItem(record["image_id"], path if path.is_absolute() else jsonl.parent / path,
                               tuple(tuple(float(v) for v in box) for box in boxes) if boxes is not None else None))
    return items


def _is_jsonl(path: Path) -> bool:
    if path.suffix.lower() in (".jsonl", ".json"):
        return True
    with open(path, encoding="utf-8", errors="replace") as stream:
        for line in stream:
            if line.strip():
                return line.lstrip().startswith("{")
    return False


def list_inputs(inputs: Sequence[str | os.PathLike]) -> list[ImageItem]:
    """Items of every INPUT in order: a folder (recursive, ids = relative paths, sorted), a text file of
    paths (one a line, ids = the line, relative to the list's folder) or an `images` JSONL."""
    items: list[ImageItem] = []
    for given in inputs:
        path = Path(given)
        if path.is_dir():
            found = _folder_items(path)
            if not found:
                raise input_error(path, None, "no image files in this folder",
                                  f"give a folder with {', '.join(sorted(IMAGE_EXTENSIONS))} files")
            items.extend(found)
        elif path.is_file():
            items.extend(_jsonl_items(path) if _is_jsonl(path) else _list_items(path))
        else:
            raise VLToolsError(f"{path}: no such file or folder; give an image folder, a list of paths or a JSONL")
    seen: set[str] = set()
    for item in items:
        if item.image_id in seen:
            raise VLToolsError(f"image id {item.image_id!r} appears twice in the inputs; ids must be unique")
        seen.add(item.image_id)
    if not items:
        raise VLToolsError(f"{', '.join(map(str, inputs))}: no images listed")
    return items


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """`i/n` -> (i, n) with 0 <= i < n; None stays None."""
    if text is None:
        return None
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise VLToolsError(f"--shard {text!r}: expected i/n, for example 0/4") from None
    if count < 1 or not 0 <= index < count:
        raise VLToolsError(f"--shard {text!r}: need 0 <= i < n")
    return index, count


def shard_items(items: Sequence[ImageItem], shard: tuple[int, int] | None) -> list[ImageItem]:
    """Every n-th item starting at i (`--shard i/n`), in input order."""
    if shard is None:
        return list(items)
    index, count = shard
    return list(items[index::count])


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


def load_rgb(path: Path, max_pixels: int = DEFAULT_MAX_PIXELS,
             plan: Callable[[int, int], tuple[int, int]] | None = None) -> tuple[Image.Image, tuple[int, int]]:
    """Decode `path` upright (EXIF orientation applied) as RGB; return it and its original (h, w).

    `plan` maps the upright (h, w) to the size the image will be resized to; it lets JPEG decoding shrink
    by DCT scaling when the image is downsized anyway. The original size returned is always that of the
    full-resolution, upright image.
    Raises BadImage with the reason for anything unusable.
    """
    if path.stat().st_size == 0:
        raise BadImage("empty file (0 bytes)")
    previous = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = max_pixels
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as image:
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
            image, (h, w) = load_rgb(item.path, self.max_pixels, plan)
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


"""Tiny Hugging Face datasets in the layouts people download, with the real column names and types (written by the
`datasets` package itself): nlphuji/flickr30k (Image bytes, a list of 5 captions, sentids, split), its DatasetDict
copies without a split column, yerevann/coco-karpathy (filepath + filename under a COCO folder, sentences,
integer sentids and cocoid) and Karpathy COCO with one row a caption (bitmind/MS-COCO: a sentences struct)."""

from __future__ import annotations

import io
from pathlib import Path

import datasets
import numpy as np
from PIL import Image

SPLITS = ["train", "train", "val", "test"]


def jpeg(seed: int, size: tuple[int, int] = (40, 48)) -> bytes:
    """A random JPEG of `size` (h, w), the same for the same seed."""
    pixels = np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG")
    return buffer.getvalue()


def captions(image: int) -> list[str]:
    return [f"image {image} caption {k}" for k in range(5)]


FLICKR = datasets.Features({
    "image": datasets.Image(), "caption": datasets.List(datasets.Value("string")),
    "sentids": datasets.List(datasets.Value("string")), "split": datasets.Value("string"),
    "img_id": datasets.Value("string"), "filename": datasets.Value("string")})


def flickr_rows(count: int = 4) -> dict[str, list]:
    """nlphuji/flickr30k's columns for `count` images: embedded JPEG bytes, 5 captions each."""
    return {"image": [{"bytes": jpeg(i), "path": None} for i in range(count)],
            "caption": [captions(i) for i in range(count)],
            "sentids": [[str(5 * i + k) for k in range(5)] for i in range(count)],
            "split": SPLITS[:count], "img_id": [str(i) for i in range(count)],
            "filename": [f"{1000 + i}.jpg" for i in range(count)]}


def flickr(folder: Path, rows: dict[str, list] | None = None) -> Path:
    """A save_to_disk folder of the Flickr30K layout."""
    datasets.Dataset.from_dict(rows or flickr_rows(), features=FLICKR).save_to_disk(str(folder))
    return folder


def flickr_dict(folder: Path) -> Path:
    """A DatasetDict (train, test) of the Flickr30K layout without its split column."""
    rows = flickr_rows()
    del rows["split"]
    features = datasets.Features({k: v for k, v in FLICKR.items() if k != "split"})
    whole = datasets.Dataset.from_dict(rows, features=features)
    datasets.DatasetDict({"train": whole.select([0, 1, 2]), "test": whole.select([3])}).save_to_disk(str(folder))
    return folder


COCO = datasets.Features({
    "filepath": datasets.Value("string"), "sentences": datasets.List(datasets.Value("string")),
    "cocoid": datasets.Value("int64"), "filename": datasets.Value("string"), "imgid": datasets.Value("int64"),
    "split": datasets.Value("string"), "sentids": datasets.List(datasets.Value("int64")),
    "url": datasets.Value("string")})


def coco_karpathy(parquet: Path, root: Path) -> Path:
    """yerevann/coco-karpathy's parquet (no image bytes) and its images as files under `root`/filepath/."""
    rows: dict[str, list] = {name: [] for name in COCO}
    for i, split in enumerate(["train", "restval", "val", "test"]):
        folder = "train2014" if split in ("train", "restval") else "val2014"
        name = f"COCO_{folder}_{i:012d}.jpg"
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / name).write_bytes(jpeg(10 + i))
        for column, value in (("filepath", folder), ("sentences", captions(i)), ("cocoid", 100 + i),
                              ("filename", name), ("imgid", i), ("split", split),
                              ("sentids", [50 + 5 * i + k for k in range(5)]),
                              ("url", f"http://images.cocodataset.org/{folder}/{name}")):
            rows[column].append(value)
    datasets.Dataset.from_dict(rows, features=COCO).to_parquet(str(parquet))
    return parquet


PER_CAPTION = datasets.Features({
    "image": datasets.Image(), "filepath": datasets.Value("string"),
    "sentids": datasets.List(datasets.Value("int32")), "filename": datasets.Value("string"),
    "imgid": datasets.Value("int32"), "split": datasets.Value("string"),
    "sentences": {"tokens": datasets.List(datasets.Value("string")), "raw": datasets.Value("string"),
                  "imgid": datasets.Value("int32"), "sentid": datasets.Value("int32")},
    "cocoid": datasets.Value("int32")})


def per_caption(folder: Path, images: int = 2, per_image: int = 3) -> Path:
    """bitmind/MS-COCO's layout as the Hub serves it (`data/train-00000-of-00001.parquet`): a row per caption,
    the image repeated on each."""
    rows: dict[str, list] = {name: [] for name in PER_CAPTION}
    for i in range(images):
        for k in range(per_image):
            sentid = 10 * i + k
            text = f"coco image {i} sentence {k}"
            for column, value in (("image", {"bytes": jpeg(20 + i), "path": None}), ("filepath", "val2014"),
                                  ("sentids", [10 * i + j for j in range(per_image)]),
                                  ("filename", f"COCO_val2014_{i:012d}.jpg"), ("imgid", i), ("split", "train"),
                                  ("sentences", {"tokens": text.split(), "raw": text, "imgid": i, "sentid": sentid}),
                                  ("cocoid", 200 + i)):
                rows[column].append(value)
    (folder / "data").mkdir(parents=True)
    datasets.Dataset.from_dict(rows, features=PER_CAPTION).to_parquet(str(folder / "data"
                                                                      / "train-00000-of-00001.parquet"))
    return folder

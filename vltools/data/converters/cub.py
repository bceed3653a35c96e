"""CUB-200-2011 text (Reed et al.'s `text_c10/<class>/<image>.txt`, one caption a line) -> captions JSONL.

Image ids are `<class>/<image>` without extension. Splits come from list files, one entry a line: an image
id (an extension such as `.jpg` is ignored) or a class folder name, which puts the whole class in that
split (the layout of the zero-shot `trainvalclasses.txt` / `testclasses.txt`); an image entry overrides
its class entry.
"""

from __future__ import annotations

import os
from pathlib import Path

from vltools.errors import VLToolsError, input_error
from vltools.io.progress import log
from vltools.io.records import check_converted
from vltools.io.sources import UNASSIGNED, SplitFiles, numbered_lines, split_assignments

EXTENSIONS = (".jpg", ".jpeg", ".png", ".txt")


def strip_extension(item: str) -> str:
    """`item` without a trailing image or text extension."""
    lower = item.lower()
    return next((item[: -len(ext)] for ext in EXTENSIONS if lower.endswith(ext)), item)


def cub_text_files(root: str | os.PathLike) -> list[tuple[str, Path]]:
    """(image id, path) of every `<class>/<image>.txt` under `root`, sorted by class then image."""
    root = Path(root)
    if not root.is_dir():
        raise VLToolsError(f"{root}: no such folder; give the text_c10 folder (one sub-folder per class)")
    files = sorted(path for path in root.glob("*/*.txt") if path.is_file())
    if not files:
        raise VLToolsError(f"{root}: no <class>/<image>.txt files; give the text_c10 folder")
    return [(f"{path.parent.name}/{path.stem}", path) for path in files]


def read_cub(root: str | os.PathLike, split_files: SplitFiles | None = None,
             drop_unassigned: bool = False) -> list[dict]:
    """Captions records, images sorted by id, captions in line order; caption_id = `<image id>#<k>`.
    `split_files`: {split: list file} or (split, list file) pairs, one file per split."""
    assignment = {strip_extension(item): split for item, split in split_assignments(split_files or {}).items()}
    files = cub_text_files(root)
    classes = {image_id.split("/", 1)[0] for image_id, _ in files}
    images = {image_id for image_id, _ in files}
    unknown = [item for item in assignment if item not in images and item not in classes]
    if unknown:
        log.warning("%s: %d split entries match no image or class (e.g. %r)", root, len(unknown), unknown[0])
    records = []
    for image_id, path in files:
        split = assignment.get(image_id) or assignment.get(image_id.split("/", 1)[0])
        if split is None and split_files:
            if drop_unassigned:
                continue
            split = UNASSIGNED
        captions = [(number, text.strip()) for number, text in numbered_lines(path) if text.strip()]
        if not captions:
            raise input_error(path, None, "no captions", "each image's file holds its captions, one a line")
        for k, (number, caption) in enumerate(captions):
            record = {"image_id": image_id, "caption": caption, "caption_id": f"{image_id}#{k}"}
            if split is not None:
                record["split"] = split
            records.append(check_converted(record, "captions", path, f"line {number}"))
    if not records:
        raise VLToolsError(f"{root}: no captions left after dropping unassigned images; check the split lists")
    return records

"""What an OpenCLIP model computes for encode, match and search: l2-normalised embeddings of images and of texts,
as open_clip's own `model.encode_image(preprocess(image), normalize=True)` and `model.encode_text(tokenizer(texts),
normalize=True)` give them. Images are listed and decoded by vltools (vltools.vision.images: folders, image files,
tars, lists, images JSONL; EXIF orientation applied), then go through open_clip's preprocess; an image that cannot
be decoded is skipped and counted by the caller.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from vltools.devices import autocast
from vltools.errors import VLToolsError, shown_ids
from vltools.io.jsonl import iter_json_lines
from vltools.io.kinds import sniff
from vltools.io.records import detect_kind
from vltools.vision.images import BadImage, ImageItem, collate_items, list_inputs, read_item
from vltools.vision.openclip import OpenClip

PathLike = str | os.PathLike


class PreprocessedImages(Dataset):
    """Each item decoded (`read_item`) and passed through open_clip's `preprocess`: {"index", "pixels"}, or
    {"index", "error"} for an image that cannot be used."""

    def __init__(self, items: Sequence[ImageItem], preprocess) -> None:
        self.items, self.preprocess = list(items), preprocess

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict:
        try:
            image, _ = read_item(self.items[index])
        except BadImage as exc:
            return {"index": index, "error": str(exc)}
        return {"index": index, "pixels": self.preprocess(image)}


def image_inputs(source: PathLike | Sequence[PathLike]) -> list[ImageItem]:
    """The images of one images input or a list of them (`list_inputs`)."""
    return list_inputs([source] if isinstance(source, str | os.PathLike) else list(source))


def captions_given(source: PathLike | Sequence[PathLike]) -> bool:
    """Whether SOURCE is a captions JSONL (its first record a caption) rather than images."""
    if not isinstance(source, str | os.PathLike) or sniff(source, folder_ok=True) != "json":
        return False
    first = next(iter_json_lines(source, "fix or remove that line"), None)
    return first is not None and isinstance(first[1], dict) and detect_kind(first[1]) == "captions"


def image_embeddings(clip: OpenClip, items: Sequence[ImageItem], device: torch.device, precision: str = "fp32",
                     batch_size: int = 64, workers: int = 0,
                     failed: list[str] | None = None) -> Iterator[tuple[list[str], np.ndarray]]:
    """(ids, float32 [B, D] l2-normalised embeddings) per batch of the images of `items` that decode, in order;
    each one that does not is appended to `failed` as "id<TAB>reason" (without `failed`, it is an error)."""
    loader = DataLoader(PreprocessedImages(items, clip.preprocess), batch_size=batch_size, num_workers=workers,
                        collate_fn=collate_items)
    model = clip.model.to(device)
    for batch in loader:
        good = [sample for sample in batch if "error" not in sample]
        for sample in batch:
            if "error" in sample:
                item = items[sample["index"]]
                if failed is None:
                    raise VLToolsError(f"{item.path}: image {item.image_id!r} cannot be used ({sample['error']}); "
                                       "fix or remove it")
                failed.append(f"{item.image_id}\t{sample['error']}")
        if good:
            pixels = torch.stack([sample["pixels"] for sample in good]).to(device)
            with torch.inference_mode(), autocast(device, precision):
                emb = model.encode_image(pixels, normalize=True)
            yield [items[sample["index"]].image_id for sample in good], emb.float().cpu().numpy()


def text_embeddings(clip: OpenClip, texts: Sequence[str], device: torch.device, precision: str = "fp32",
                    batch_size: int = 256) -> Iterator[np.ndarray]:
    """float32 [B, D] l2-normalised embeddings per batch of `texts`, in order (open_clip's tokenizer)."""
    model = clip.model.to(device)
    for start in range(0, len(texts), batch_size):
        tokens = clip.tokenizer(list(texts[start:start + batch_size])).to(device)
        with torch.inference_mode(), autocast(device, precision):
            emb = model.encode_text(tokens, normalize=True)
        yield emb.float().cpu().numpy()


def named_image_embeddings(clip: OpenClip, source: PathLike | Sequence[PathLike], ids: Sequence[str],
                           device: torch.device, precision: str = "fp32", batch_size: int = 64,
                           workers: int = 0) -> np.ndarray:
    """[len(ids), D] embeddings of the images `ids` of SOURCE (images inputs), in that order: each must be there and
    decode (matching ranks them all)."""
    found = {item.image_id: item for item in image_inputs(source)}
    missing = [image_id for image_id in ids if image_id not in found]
    if missing:
        raise VLToolsError(f"{source}: {len(missing)} of the {len(ids)} images the captions name are not in it: "
                           f"{shown_ids(missing)}; give the images the captions were written for")
    blocks = [emb for _, emb in image_embeddings(clip, [found[i] for i in ids], device, precision, batch_size,
                                                 workers)]
    return np.concatenate(blocks)

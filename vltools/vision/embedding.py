"""Image files for models that embed whole images (R-MAC): loading by id, padded batches, embedding loops.

Images are decoded upright as RGB and resized so that their longest side is `size` (aspect kept). A batch of
images of different sizes is padded at the bottom right, with each image's (h, w) beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader

from vltools.errors import VLToolsError
from vltools.io.progress import progress
from vltools.vision.images import ImageDataset, ImageItem, collate_items


class ImageStore:
    """Decoded, resized uint8 images by position in `items`, optionally kept in memory (small datasets)."""

    def __init__(self, items: Sequence[ImageItem], size: int, cache: bool = False) -> None:
        self.items = list(items)
        self.dataset = ImageDataset(self.items, "longer", size)
        self.cache: dict[int, torch.Tensor] | None = {} if cache else None

    def __len__(self) -> int:
        return len(self.items)

    def image(self, index: int, sample: dict | None = None) -> torch.Tensor:
        """(3, h, w) uint8 of item `index` (`sample`: an already decoded ImageDataset element)."""
        if self.cache is not None and index in self.cache:
            return self.cache[index]
        sample = self.dataset[index] if sample is None else sample
        if "error" in sample:
            item = self.items[index]
            raise VLToolsError(f"{item.path}: image {item.image_id!r} cannot be used ({sample['error']}); fix or "
                               "remove it from the images file and the proxy")
        if self.cache is not None:
            self.cache[index] = sample["image"]
        return sample["image"]


def pad_batch(images: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, 3, H, W) uint8 padded at the bottom right, and (B, 2) int64 sizes (h, w)."""
    sizes = torch.tensor([tuple(image.shape[1:]) for image in images], dtype=torch.int64)
    height, width = (int(v) for v in sizes.max(dim=0).values)
    out = torch.zeros(len(images), 3, height, width, dtype=torch.uint8)
    for i, image in enumerate(images):
        out[i, :, :image.shape[1], :image.shape[2]] = image
    return out, sizes


def _batches(store: ImageStore, indices: Sequence[int], batch_size: int, workers: int):
    """Lists of (index, image) in order; decoding in `workers` DataLoader processes unless cached."""
    indices = list(indices)
    if store.cache is not None or workers == 0:
        for start in range(0, len(indices), batch_size):
            yield [(i, store.image(i)) for i in indices[start:start + batch_size]]
        return
    subset = torch.utils.data.Subset(store.dataset, indices)
    loader = DataLoader(subset, batch_size=batch_size, num_workers=workers, collate_fn=collate_items)
    position = 0
    for samples in loader:
        batch = []
        for sample in samples:
            index = indices[position]
            position += 1
            batch.append((index, store.image(index, sample)))
        yield batch


def embedding_batches(encode: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], store: ImageStore,
                      indices: Sequence[int], device: torch.device, batch_size: int = 32, workers: int = 0,
                      desc: str | None = "embed images") -> Iterator[np.ndarray]:
    """float32 [B, D] per batch of `batch_size` of `indices`, in order: `encode(padded uint8 images, sizes)` of the
    store's images; a progress line `desc` unless None (the inference runner reports progress itself)."""
    batches = _batches(store, indices, batch_size, workers)
    if desc is not None:
        batches = progress(batches, total=len(indices), desc=desc, unit="images", size=len)
    with torch.inference_mode():
        for batch in batches:
            images, sizes = pad_batch([image for _, image in batch])
            yield encode(images.to(device), sizes).float().cpu().numpy()


def embed_images(encode: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], store: ImageStore,
                 indices: Sequence[int], device: torch.device, batch_size: int = 32, workers: int = 0,
                 desc: str = "embed images") -> np.ndarray:
    """float32 [len(indices), D]: `encode(padded uint8 images, sizes)` of the store's images, in the order given."""
    out = list(embedding_batches(encode, store, indices, device, batch_size, workers, desc))
    return np.concatenate(out) if out else np.zeros((0, 0), dtype=np.float32)

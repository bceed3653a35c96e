"""Caption-image pairs for training captioners, with the mismatched pairs of CL and IL.

One item per ground-truth caption of the split (its image's features read from the features HDF5
when the batch is fetched). For Contrastive Learning each item also carries `negatives` captions
drawn afresh every epoch (uniformly among the split's captions of other images: Dai & Lin's c_/t), from
a generator keyed by (seed, epoch, item) (vltools.data.draws); for the introspective baseline each image
has one fixed mismatched image (`mismatch`, chosen once from the seed).

A collated batch holds `image.<field>` tensors (the split's features datasets), `tokens`
[(1 + K) B, L] (B captions, then the K negative sets in order) or, with mismatched images, [2B, L]
(the captions twice), and `image_rows` saying under which image row each token row is scored.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch

from vltools.data.captions import CaptionSplit, FeaturesDataset
from vltools.data.draws import NEGATIVES, EpochDraws
from vltools.text.captions import pad_tokens

IMAGE = "image."


def feature_fields(available: Sequence[str], needs: Sequence[str]) -> list[str]:
    """The datasets to read for a model that needs `needs` (plus /num_regions when regions vary)."""
    fields = list(dict.fromkeys(needs))
    if "regions" in fields and "num_regions" in available:
        fields.append("num_regions")
    return fields


def image_tensors(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """Feature arrays as tensors: float32 features, int64 region counts."""
    return {name: torch.from_numpy(np.asarray(value)).long() if name == "num_regions"
            else torch.from_numpy(np.asarray(value, dtype=np.float32)) for name, value in arrays.items()}


def draw_negatives(image_index: np.ndarray, count: int, item: int, rng: np.random.Generator) -> np.ndarray:
    """`count` caption indices drawn with `rng`, each a caption of an image other than caption `item`'s own
    (uniformly)."""
    n = len(image_index)
    own = image_index[item]
    if len(np.unique(image_index)) < 2:
        raise ValueError("mismatched captions need at least two images")
    draws = rng.integers(n, size=count)
    clash = image_index[draws] == own
    while clash.any():
        draws[clash] = rng.integers(n, size=int(clash.sum()))
        clash = image_index[draws] == own
    return draws


def fixed_mismatches(images: int, seed: int) -> np.ndarray:
    """For each image, another image (a random derangement chosen once from `seed`)."""
    generator = torch.Generator().manual_seed(seed)
    offsets = torch.randint(1, images, (images,), generator=generator).numpy()
    return (np.arange(images) + offsets) % images


class CaptioningDataset(FeaturesDataset, EpochDraws):
    """The split's captions with their images' features, optional negatives (CL, drawn from `seed` and the epoch)
    or mismatched images (IL)."""

    def __init__(self, features_path: str | os.PathLike, split: CaptionSplit, tokens: Sequence[Sequence[int]],
                 fields: Sequence[str], negatives: int = 0, mismatch: np.ndarray | None = None,
                 seed: int = 0) -> None:
        super().__init__(features_path)
        self.split, self.tokens, self.fields = split, list(tokens), list(fields)
        self.negatives, self.mismatch, self.seed = negatives, mismatch, seed

    def __len__(self) -> int:
        return len(self.split)

    def _images(self, image_rows: np.ndarray) -> list[dict[str, np.ndarray]]:
        arrays = self.reader.read([self.split.image_ids[i] for i in image_rows], self.fields)
        return [{name: value[n] for name, value in arrays.items()} for n in range(len(image_rows))]

    def __getitems__(self, indices: Sequence[int]) -> list[dict]:
        indices = np.asarray(indices, dtype=np.int64)
        images = self.split.caption_image_index[indices]
        items = [{"image": image, "tokens": self.tokens[i]} for image, i in zip(self._images(images), indices,
                                                                                 strict=True)]
        if self.negatives:
            for item, index in zip(items, indices, strict=True):
                drawn = draw_negatives(self.split.caption_image_index, self.negatives, int(index),
                                       self.rng(NEGATIVES, int(index)))
                item["negatives"] = [self.tokens[j] for j in drawn]
        if self.mismatch is not None:
            for item, other in zip(items, self._images(self.mismatch[images]), strict=True):
                item["mismatch"] = other
        return items


def collate_captioning(items: Sequence[dict]) -> dict[str, torch.Tensor]:
    """Stack items (in item order) into `image.<field>`, `tokens` and `image_rows` (see the module docstring)."""
    b = len(items)
    images = [item["image"] for item in items]
    token_lists = [item["tokens"] for item in items]
    rows = torch.arange(b)
    if "negatives" in items[0]:
        k = len(items[0]["negatives"])
        token_lists += [item["negatives"][j] for j in range(k) for item in items]
        rows = rows.repeat(1 + k)
    if "mismatch" in items[0]:
        images += [item["mismatch"] for item in items]
        token_lists += token_lists
        rows = torch.arange(2 * b)
    stacked = image_tensors({name: np.stack([image[name] for image in images]) for name in images[0]})
    batch = {IMAGE + name: value for name, value in stacked.items()}
    batch["tokens"] = pad_tokens(token_lists)[0]
    batch["image_rows"] = rows
    return batch


def batch_images(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The `image.<field>` tensors of a collated batch, keyed by field."""
    return {name[len(IMAGE):]: value for name, value in batch.items() if name.startswith(IMAGE)}

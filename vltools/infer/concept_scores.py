"""SCO's r regions per image (a multi-scale grid, the documented stand-in for the paper's proposals) and the
`concept-scores` extractor that runs the concept CNN over them inside the shared extraction loop.

The grid rule: for each level n (default 1, 2, 3, 6) the n x n windows whose sides are 2/(n + 1) of the image's
height and width, placed with a stride of 1/(n + 1), so neighbouring windows overlap by half; level 1 is the
whole image. r = sum of n^2 = 1 + 4 + 9 + 36 = 50 with the default levels. Every window is resampled to a
square crop of the CNN's input size by RoIAlign on the image itself, so all regions of a batch of images are
cut in one call and go through the network as one batch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import torch
from torchvision.ops import roi_align

from vltools.devices import autocast, resolve_device
from vltools.infer.settings import CONCEPT_LEVELS, RunOptions
from vltools.io.provenance import ids_digest, input_digest
from vltools.models.concepts import ConceptCNN
from vltools.vision.backbones import normalize
from vltools.vision.images import ImageDataset, ImageItem


def grid_windows(h: int, w: int, levels: Sequence[int] = CONCEPT_LEVELS) -> torch.Tensor:
    """The rule's windows [r, 4] as x1 y1 x2 y2 in pixels of an h x w image, level by level, row-major."""
    boxes = []
    for n in levels:
        bw, bh = 2 * w / (n + 1), 2 * h / (n + 1)
        for row in range(n):
            for col in range(n):
                x1, y1 = col * w / (n + 1), row * h / (n + 1)
                boxes.append([x1, y1, x1 + bw, y1 + bh])
    return torch.tensor(boxes, dtype=torch.float32)


def crop_regions(images: torch.Tensor, windows: torch.Tensor, size: int) -> torch.Tensor:
    """Crops [B, r, C, size, size] of every window of every image [B, C, H, W], resampled by RoIAlign."""
    b, r = images.size(0), windows.size(0)
    rois = torch.cat([torch.arange(b, dtype=windows.dtype, device=images.device).repeat_interleave(r)[:, None],
                      windows.to(images.device).repeat(b, 1)], dim=1)
    crops = roi_align(images, rois.to(images.dtype), output_size=size, spatial_scale=1.0, sampling_ratio=2,
                      aligned=True)
    return crops.view(b, r, images.size(1), size, size)


class ConceptScorer:
    """The extraction-loop worker of `concept-scores`: images -> r grid crops -> concept CNN -> p in `/global`."""

    stage = "concept-scores"

    def __init__(self, model: ConceptCNN, info: dict, run: RunOptions, image_size: int, crop_size: int,
                 levels: Sequence[int] = CONCEPT_LEVELS) -> None:
        self.run, self.info = run, info
        self.device = resolve_device(run.device)
        self.model = model.to(self.device).eval()
        self.image_size, self.crop_size, self.levels = image_size, crop_size, tuple(levels)
        self.windows = grid_windows(image_size, image_size, self.levels).to(self.device)

    def attrs(self, items: Sequence[ImageItem]) -> dict[str, object]:
        return {"stage": self.stage, "global": "concepts", "regions": "grid", "levels": json.dumps(self.levels),
                "num_regions": len(self.windows), "image_size": self.image_size, "crop_size": self.crop_size,
                "resize": "square", "precision": self.run.precision, "seed": self.run.seed,
                "inputs_digest": ids_digest([item.image_id for item in items]), **self.info}

    def item_digest(self, item: ImageItem) -> str:
        """The digest of the image file a row is scored from, stored for --resume."""
        return input_digest([item.path])

    def dataset(self, items: Sequence[ImageItem]) -> ImageDataset:
        return ImageDataset(items, "square", self.image_size, max_pixels=self.run.max_pixels)

    def __call__(self, samples: list[dict], items: list[ImageItem]) -> dict[str, np.ndarray]:
        images = normalize(torch.stack([s["image"] for s in samples]).to(self.device))
        with autocast(self.device, self.run.precision):
            scores = self.model.region_scores(crop_regions(images, self.windows, self.crop_size))
        return {"global": scores.float().cpu().numpy(),
                "image_size": np.array([s["orig_size"] for s in samples], dtype=np.int32)}

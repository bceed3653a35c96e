"""`extract-regions --regions bottom-up`: the bottom-up-attention features (Anderson et al. 2018) of images, the
features every released image-text matching model of the SCAN / SGRAF family was trained on.

`BottomUpExtractor` is a step of the extraction runner (vltools.infer.extract.extract: resumable parts, shards,
DataLoader workers, bad images skipped): images are decoded at full resolution in the workers (the detector
resizes them itself, as released: shorter side 600, longer side at most 1000) and each batch goes through
`vltools.models.bottom_up.BottomUpAttention` in one forward pass (images of different sizes zero-padded). Each
image's row holds its K regions: `/regions` (K, 2048) pooled res5 features, `/boxes` in original-image pixels,
`/labels` and `/attributes` (0-based rows of the released objects_vocab.txt and attributes_vocab.txt, background
and "no attribute" excluded) with `/label_scores` and `/attribute_scores`; K is `--num-regions` (fixed, 36 as the
released fixed-36 features) or between `--min-regions` and `--max-regions` by `--score-threshold` (the released
10-100 features), then rows are zero-padded to the maximum and `/num_regions` holds each image's count.

The class names are data, not weights: with `--detector-vocab DIR` (the folder holding the released
objects_vocab.txt and attributes_vocab.txt) they are stored as the `label_names` and `attribute_names` attributes
(JSON lists); without it only the indices are stored.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from vltools.devices import autocast, resolve_device
from vltools.errors import VLToolsError, argument
from vltools.infer.loader import load_model
from vltools.infer.settings import BOTTOM_UP_WEIGHTS, RunOptions
from vltools.io.checkpoints import content_digest
from vltools.io.features import BOTTOM_UP
from vltools.io.model_store import resolve_models
from vltools.io.progress import log
from vltools.io.provenance import ids_digest, input_digest
from vltools.io.sources import read_class_names
from vltools.models.bottom_up import BottomUpRegions
from vltools.vision.images import BadImage, ImageItem, load_rgb
from vltools.vision.limits import DEFAULT_MAX_PIXELS

VOCAB_FILES = ("objects_vocab.txt", "attributes_vocab.txt")
ROW_FIELDS = ("regions", "boxes", "labels", "label_scores", "attributes", "attribute_scores")
INDEX_FIELDS = ("labels", "attributes")


def resolve_detector(value: str) -> Path:
    """The checkpoint of `--detector-weights`: a file, or a model-store name of one checkpoint."""
    paths = resolve_models([value], "detector_weights")
    if len(paths) != 1:
        raise VLToolsError(f"--detector-weights {value}: names {len(paths)} checkpoints in the model store; a "
                           "detector is one checkpoint")
    return paths[0]


class BottomUpImages(torch.utils.data.Dataset):
    """Items decoded upright to RGB at full resolution, (3, H, W) uint8, or their failure reason: a bad image, or
    one with a side under `min_side` pixels, where the detector cannot propose any box."""

    def __init__(self, items: Sequence[ImageItem], max_pixels: int = DEFAULT_MAX_PIXELS, min_side: int = 16) -> None:
        self.items = list(items)
        self.max_pixels = max_pixels
        self.min_side = min_side

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict:
        try:
            image, (h, w) = load_rgb(self.items[index], self.max_pixels)
        except BadImage as exc:
            return {"index": index, "error": str(exc)}
        except OSError as exc:
            return {"index": index, "error": f"cannot read file ({exc.strerror or exc})"}
        if min(h, w) < self.min_side:
            return {"index": index, "error": f"{w}x{h} pixels: the bottom-up detector proposes no box with a side "
                                             f"under {self.min_side} pixels"}
        pixels = torch.from_numpy(np.asarray(image, dtype=np.uint8).copy()).permute(2, 0, 1).contiguous()
        return {"index": index, "orig_size": (h, w), "image": pixels}


class BottomUpExtractor:
    """The bottom-up-attention regions of each image, as a step of the extraction runner."""

    stage = "extract-regions"

    def __init__(self, run: RunOptions, weights: str = BOTTOM_UP_WEIGHTS, num_regions: int | None = 36,
                 min_regions: int = 10, max_regions: int = 100, score_threshold: float = 0.2,
                 vocab_dir: str | Path | None = None) -> None:
        if num_regions is None and not 1 <= min_regions <= max_regions:
            raise VLToolsError(f"{argument('min_regions', str(min_regions))} "
                               f"{argument('max_regions', str(max_regions))}: need 1 <= min <= max")
        self.run = run
        self.device = resolve_device(run.device)
        self.num_regions, self.min_regions, self.max_regions = num_regions, min_regions, max_regions
        self.score_threshold = score_threshold
        path = resolve_detector(weights)
        loaded = load_model(path, "detector", "detector_weights")
        self.config = loaded.config
        proposals = int(self.config["rpn_post_nms"])
        if (num_regions or min_regions) > proposals:
            option = argument("num_regions" if num_regions else "min_regions", str(num_regions or min_regions))
            raise VLToolsError(f"{option}: the detector of {path} proposes at most "
                               f"{proposals} boxes an image; ask for fewer regions")
        self.slots = num_regions or min(max_regions, proposals)
        self.weights = content_digest(loaded.payload["state_dict"])[:16]
        self.names = self._names(vocab_dir)
        self.model = loaded.model.to(self.device)
        self.dim = loaded.model.dim

    def _names(self, vocab_dir: str | Path | None) -> dict[str, str]:
        """The label_names and attribute_names attributes (JSON lists) from the vocabulary folder, or none."""
        if vocab_dir is None:
            return {}
        sizes = (int(self.config["num_classes"]) - 1, int(self.config["num_attributes"]) - 1)
        objects, attributes = (read_class_names(Path(vocab_dir) / name, size)
                               for name, size in zip(VOCAB_FILES, sizes, strict=True))
        return {"label_names": json.dumps(objects), "attribute_names": json.dumps(attributes)}

    @property
    def variable(self) -> bool:
        """Whether the number of regions varies per image (then /num_regions is written)."""
        return self.num_regions is None

    def attrs(self, items: Sequence[ImageItem]) -> dict[str, object]:
        """What the output records about how its features were made: the extractor and its weights' digest (the
        same for every conversion of the same released file), the box choice, the vocabularies when given."""
        count = str(self.num_regions) if self.num_regions else \
            f"{self.min_regions}-{self.max_regions} at score >= {self.score_threshold}"
        return {"stage": self.stage, "extractor": BOTTOM_UP, "regions": BOTTOM_UP, "backbone": "resnet101-c4 (caffe)",
                "weights": self.weights, "feature_dim": self.dim, "num_regions": count, "box_source": "proposals",
                "resize": "shorter", "image_size": int(self.config["test_scale"]),
                "max_size": int(self.config["test_max_size"]), "precision": self.run.precision,
                "label_index": "0-based rows of objects_vocab.txt and attributes_vocab.txt (background and "
                               "'no attribute' excluded)",
                **self.names, "inputs_digest": ids_digest([item.image_id for item in items])}

    def item_digest(self, item: ImageItem) -> str:
        """The digest of what `item`'s row is computed from (its file), stored for --resume."""
        return input_digest([item.path])

    def dataset(self, items: Sequence[ImageItem]) -> BottomUpImages:
        return BottomUpImages(items, self.run.max_pixels, int(self.config["rpn_min_size"]))

    def __call__(self, samples: list[dict], items: list[ImageItem]) -> dict[str, np.ndarray]:
        """Arrays for the decoded `samples` (rows in order), all images in one forward pass: regions, boxes,
        labels, label_scores, attributes, attribute_scores, image_size, and num_regions when K varies."""
        images = [sample["image"].to(self.device, non_blocking=True) for sample in samples]
        with autocast(self.device, self.run.precision):
            found = self.model(images, num_regions=self.num_regions, min_regions=self.min_regions,
                               max_regions=self.max_regions, score_threshold=self.score_threshold)
        rows = [self._pad(regions, item) for regions, item in zip(found, items, strict=True)]
        out = {name: np.stack([row[name] for row in rows]) for name in rows[0]}
        out["image_size"] = np.array([sample["orig_size"] for sample in samples], dtype=np.int32)
        return out

    def _pad(self, regions: BottomUpRegions, item: ImageItem) -> dict[str, np.ndarray]:
        """One image's K regions zero-padded to the file's K rows (fewer than --num-regions only when the detector
        proposed fewer boxes, with a warning)."""
        count = len(regions.boxes)
        if count == 0:
            raise VLToolsError(f"{item.path}: image {item.image_id!r}: the detector proposed no box; remove the "
                               "image or crop it larger")
        if count < self.slots and not self.variable:
            log.warning(f"image {item.image_id!r}: the detector proposed only {count} boxes; its rows "
                        f"{count + 1}-{self.slots} are zeros")
        row = {}
        for name in ROW_FIELDS:
            value = getattr(regions, "features" if name == "regions" else name).cpu().numpy()
            row[name] = np.zeros((self.slots, *value.shape[1:]), dtype=np.int32 if name in INDEX_FIELDS
                                 else np.float32)
            row[name][:count] = value
        if self.variable:
            row["num_regions"] = np.int32(count)
        return row

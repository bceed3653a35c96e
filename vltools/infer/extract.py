"""The extraction run: images decoded in DataLoader workers while the main process runs batched forward
passes (inference mode, channels-last), rows written to resumable parts, then merged into the output.

Two extractors share the loop: `RegionExtractor` (extract-regions: regions, boxes, global vectors) and
`SegmentExtractor` (segment-pool: feature map and foreground mask). Each image is padded only up to a
multiple of the backbone stride and batched with images of the same size, so its features never depend
on which other images share its batch (a shard gives the same rows as a single run).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from vltools.devices import autocast, resolve_device
from vltools.errors import VLToolsError, argument, input_error
from vltools.infer import runner
from vltools.infer.runner import check_output
from vltools.infer.settings import RunOptions
from vltools.io.checkpoint import Rows
from vltools.io.features import FeaturesReader, comparable_attrs, field_dtypes, write_features
from vltools.io.output import written
from vltools.io.provenance import ids_digest, input_digest
from vltools.io.shards import Part
from vltools.io.write_errors import OutputError
from vltools.vision.backbones import build_backbone, fetch_pretrained, normalize, pretrained_name
from vltools.vision.images import ImageDataset, ImageItem, collate_items
from vltools.vision.masks import FCN_WEIGHTS, VOC_CLASSES, area_resize, build_fcn, mask_path
from vltools.vision.pooling import average, rmac, ten_crop_average
from vltools.vision.regions import (
    DETECTOR_WEIGHTS,
    ROI_OUTPUT,
    ROI_SAMPLING,
    build_detector,
    grid_boxes,
    grid_features,
    roi_features,
    select_boxes,
)

DEFAULT_SIZES = {"shorter": 600, "square": 448, "longer": 576}
LONG_SIDE_RATIO = 5 / 3  # shorter side 600 -> long side at most 1000, as for the bottom-up features


def _shape_groups(samples: Sequence[dict]) -> list[list[int]]:
    """Indices of samples grouped by image size, each group in input order."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for number, sample in enumerate(samples):
        groups.setdefault(tuple(sample["image"].shape), []).append(number)
    return list(groups.values())


class _Extractor:
    """Shared machinery: the backbone, device placement, and per-size-group forward passes."""

    stage = ""

    def __init__(self, backbone: str, weights: str, run: RunOptions) -> None:
        torch.manual_seed(run.seed)
        self.run = run
        self.device = resolve_device(run.device)
        self.backbone, self.weights = build_backbone(backbone, weights)
        self.backbone = self.backbone.to(self.device, memory_format=torch.channels_last)
        self.backbone_name = backbone

    def _stack(self, samples: Sequence[dict]) -> torch.Tensor:
        """Same-size uint8 images of `samples` as one batch on the device."""
        return torch.stack([s["image"] for s in samples]).to(self.device, non_blocking=True)

    def _inputs(self, images: torch.Tensor) -> torch.Tensor:
        """Normalise uint8 images on the device and pad right/bottom to a multiple of the stride."""
        stride = self.backbone.stride
        h, w = images.shape[-2:]
        padded = F.pad(normalize(images), (0, -w % stride, 0, -h % stride))
        return padded.contiguous(memory_format=torch.channels_last)

    def _forward(self, inputs: torch.Tensor) -> torch.Tensor:
        with autocast(self.device, self.run.precision):
            return self.backbone(inputs).float()

    def item_digest(self, item: ImageItem) -> str:
        """The digest of what `item`'s row is computed from (its file and boxes), stored for --resume."""
        return input_digest([item.path], item.boxes)

    def base_attrs(self, items: Sequence[ImageItem]) -> dict[str, object]:
        return {"stage": self.stage, "backbone": self.backbone_name, "weights": self.weights,
                "stride": self.backbone.stride, "feature_dim": self.backbone.dim, "precision": self.run.precision,
                "seed": self.run.seed, "inputs_digest": ids_digest([item.image_id for item in items])}


class RegionExtractor(_Extractor):
    """Region features (detector, grid or given boxes) and an optional global vector for each image."""

    stage = "extract-regions"

    def __init__(self, items: Sequence[ImageItem], run: RunOptions, backbone: str = "resnet101",
                 weights: str = "imagenet", regions: str = "detector", global_pool: str | None = None,
                 image_size: int | None = None, crop_size: int = 224, num_regions: int | None = 36,
                 min_regions: int = 10, max_regions: int = 100, score_threshold: float = 0.2,
                 detector_weights: str = "coco") -> None:
        if regions == "none" and global_pool is None:
            raise VLToolsError(f"{argument('regions', 'none')} needs a {argument('global_pool')} mode (avg, rmac or "
                               "tencrop); nothing to extract")
        fetch_pretrained([name for name in (pretrained_name(backbone, weights), regions == "detector"
                                            and DETECTOR_WEIGHTS.get(detector_weights)) if name])  # offline: one line
        super().__init__(backbone, weights, run)
        self.regions = regions
        self.global_pool = global_pool
        self.crop_size = crop_size
        self.num_regions = num_regions
        self.min_regions, self.max_regions, self.score_threshold = min_regions, max_regions, score_threshold
        if regions == "grid":
            self.resize = "square"
        elif regions == "none" and global_pool == "rmac":
            self.resize = "longer"
        else:
            self.resize = "shorter"
        self.image_size = image_size or DEFAULT_SIZES[self.resize]
        self.max_size = round(self.image_size * LONG_SIDE_RATIO) if self.resize == "shorter" else None
        self.detector = None
        self.detector_weights = None
        if regions == "detector":
            if num_regions is None and not 1 <= min_regions <= max_regions:
                raise VLToolsError(f"{argument('min_regions', str(min_regions))} "
                                   f"{argument('max_regions', str(max_regions))}: need 1 <= min <= max")
            candidates = max(num_regions or max_regions, max_regions)
            detector, self.detector_weights = build_detector(detector_weights, self.image_size, self.max_size,
                                                             candidates)
            self.detector = detector.to(self.device)
        self.slots = self._slots(items)

    def _slots(self, items: Sequence[ImageItem]) -> int | None:
        """Rows per image in /regions (K), or None without regions."""
        if self.regions == "detector":
            return self.num_regions or self.max_regions
        if self.regions == "grid":
            cells = -(-self.image_size // self.backbone.stride)
            return cells * cells
        if self.regions == "boxes":
            for item in items:
                if not item.boxes:
                    raise VLToolsError(f"image {item.image_id!r} has no boxes; --regions boxes needs a JSONL input "
                                       "with a non-empty 'boxes' list for every image")
                for box in item.boxes:
                    if not (box[2] > box[0] and box[3] > box[1]):
                        raise VLToolsError(f"image {item.image_id!r}: box {list(box)} is empty; boxes are "
                                           "[x1, y1, x2, y2] in pixels with x2 > x1 and y2 > y1")
            return max(len(item.boxes) for item in items)
        return None

    @property
    def variable(self) -> bool:
        """Whether the number of regions varies per image (then /num_regions is written)."""
        return self.regions == "boxes" or (self.regions == "detector" and self.num_regions is None)

    def attrs(self, items: Sequence[ImageItem]) -> dict[str, object]:
        """What the output records about how its features were made."""
        attrs = {**self.base_attrs(items), "regions": self.regions, "global": self.global_pool or "none",
                 "image_size": self.image_size, "resize": self.resize, "max_size": self.max_size or 0}
        if self.regions in ("detector", "boxes"):
            attrs["roi"] = f"roi_align {ROI_OUTPUT}x{ROI_OUTPUT} bins, {ROI_SAMPLING}x{ROI_SAMPLING} samples, " \
                           "aligned, mean-pooled"
        if self.regions == "detector":
            attrs["detector"] = "fasterrcnn_resnet50_fpn"
            attrs["detector_weights"] = self.detector_weights
            attrs["num_regions"] = str(self.num_regions) if self.num_regions else \
                f"{self.min_regions}-{self.max_regions} at score >= {self.score_threshold}"
        if self.global_pool == "tencrop":
            attrs["crop_size"] = self.crop_size
        return attrs

    def dataset(self, items: Sequence[ImageItem]) -> ImageDataset:
        return ImageDataset(items, self.resize, self.image_size, self.max_size,
                            ten_crop=self.crop_size if self.global_pool == "tencrop" else None,
                            max_pixels=self.run.max_pixels)

    def _boxes(self, group: list[dict], items: list[ImageItem], images: torch.Tensor) -> list[torch.Tensor]:
        """Boxes (K_i, 4) in input pixels of each image of a same-size group."""
        h, w = images.shape[-2:]
        if self.regions == "grid":
            cells = grid_boxes(-(-h // self.backbone.stride), -(-w // self.backbone.stride), self.backbone.stride,
                               (h, w))
            return [cells.to(self.device)] * len(group)
        if self.regions == "boxes":
            out = []
            for sample, item in zip(group, items, strict=True):
                scale = _scales(sample, (h, w))
                given = torch.tensor(item.boxes, dtype=torch.float32) * scale
                given[:, 0::2] = given[:, 0::2].clamp(0, w)
                given[:, 1::2] = given[:, 1::2].clamp(0, h)
                out.append(given.to(self.device))
            return out
        with autocast(self.device, self.run.precision):
            detections = self.detector(list(images.float().div(255.0).unbind(0)))
        return [select_boxes(b, s, (h, w), self.num_regions, self.min_regions, self.max_regions,
                             self.score_threshold) for b, s in detections]

    def __call__(self, samples: list[dict], items: list[ImageItem]) -> dict[str, np.ndarray]:
        """Arrays for the decoded `samples` (rows in order): image_size, and regions/boxes/num_regions/global."""
        rows: list[dict[str, np.ndarray]] = [{} for _ in samples]
        whole_image = self.regions != "none" or self.global_pool in ("avg", "rmac")   # tencrop alone needs no pass
        for indices in _shape_groups(samples) if whole_image else []:
            group = [samples[i] for i in indices]
            images = self._stack(group)
            featmaps = self._forward(self._inputs(images))
            if self.regions != "none":
                boxes = self._boxes(group, [items[i] for i in indices], images)
                for j, i in enumerate(indices):
                    vectors = grid_features(featmaps[j]) if self.regions == "grid" else \
                        roi_features(featmaps[j:j + 1], [boxes[j]], self.backbone.stride)[0]
                    rows[i].update(self._pad(vectors, self._original_boxes(boxes[j], group[j], items[i], images)))
            if self.global_pool in ("avg", "rmac"):
                vectors = average(featmaps) if self.global_pool == "avg" else torch.stack([rmac(f) for f in featmaps])
                for j, i in enumerate(indices):
                    rows[i]["global"] = vectors[j].cpu().numpy()
        if self.global_pool == "tencrop":
            crops = torch.cat([s["crops"] for s in samples]).to(self.device, non_blocking=True)
            vectors = ten_crop_average(self._forward(normalize(crops).contiguous(memory_format=torch.channels_last)))
            for i in range(len(samples)):
                rows[i]["global"] = vectors[i].cpu().numpy()
        out = {name: np.stack([row[name] for row in rows]) for name in rows[0]}
        out["image_size"] = np.array([s["orig_size"] for s in samples], dtype=np.int32)
        return out

    def _original_boxes(self, boxes: torch.Tensor, sample: dict, item: ImageItem, images: torch.Tensor) -> torch.Tensor:
        """Boxes to store, in original pixels: given boxes exactly as given, others mapped back from the input."""
        if self.regions == "boxes":
            return torch.tensor(item.boxes, dtype=torch.float32)
        return boxes.cpu() / _scales(sample, images.shape[-2:])

    def _pad(self, vectors: torch.Tensor, boxes: torch.Tensor) -> dict[str, np.ndarray]:
        """One image's K x D regions and K x 4 boxes (original pixels), zero-padded to the file's K."""
        count = len(vectors)
        regions = np.zeros((self.slots, vectors.shape[1]), dtype=np.float32)
        padded_boxes = np.zeros((self.slots, 4), dtype=np.float32)
        regions[:count] = vectors.cpu().numpy()
        padded_boxes[:count] = boxes.cpu().numpy()
        row = {"regions": regions, "boxes": padded_boxes}
        if self.variable:
            row["num_regions"] = np.int32(count)
        return row


def _scales(sample: dict, input_hw: Sequence[int]) -> torch.Tensor:
    """(4,) factors from original-image pixels to input pixels, as x y x y."""
    h, w = sample["orig_size"]
    sy, sx = input_hw[0] / h, input_hw[1] / w
    return torch.tensor([sx, sy, sx, sy], dtype=torch.float32)


class SegmentExtractor(_Extractor):
    """L2C's encoder input: the backbone feature map F (D, h, w) and a foreground mask B (h, w) in [0, 1]."""

    stage = "segment-pool"

    def __init__(self, run: RunOptions, backbone: str = "resnet101", weights: str = "imagenet",
                 image_size: int = 448, class_index: int = 3, seg_weights: str = "coco-voc",
                 mask_dir: Path | None = None) -> None:
        fetch_pretrained([name for name in (pretrained_name(backbone, weights), mask_dir is None
                                            and FCN_WEIGHTS.get(seg_weights)) if name])  # offline: one line
        super().__init__(backbone, weights, run)
        stride = self.backbone.stride
        self.image_size = -(-image_size // stride) * stride
        self.mask_dir = mask_dir
        self.class_index = class_index
        self.fcn = None
        self.seg_weights = None
        if mask_dir is None:
            fcn, self.seg_weights = build_fcn(seg_weights, class_index)
            self.fcn = fcn.to(self.device, memory_format=torch.channels_last)

    def attrs(self, items: Sequence[ImageItem]) -> dict[str, object]:
        attrs = {**self.base_attrs(items), "regions": "featmap", "image_size": self.image_size, "resize": "square"}
        if self.mask_dir is None:
            attrs.update(mask="fcn_resnet101", seg_weights=self.seg_weights, mask_class=self.class_index,
                         mask_class_name=VOC_CLASSES[self.class_index])
        else:
            attrs["mask"] = f"files in {self.mask_dir}"
        return attrs

    def item_digest(self, item: ImageItem) -> str:
        """The image's file and, with --masks, its mask file."""
        files = [item.path] + ([mask_path(self.mask_dir, item.image_id)] if self.mask_dir is not None else [])
        return input_digest(files, item.boxes)

    def dataset(self, items: Sequence[ImageItem]) -> ImageDataset:
        return ImageDataset(items, "square", self.image_size, max_pixels=self.run.max_pixels, mask_dir=self.mask_dir)

    def __call__(self, samples: list[dict], items: list[ImageItem]) -> dict[str, np.ndarray]:
        inputs = self._inputs(self._stack(samples))
        featmaps = self._forward(inputs)
        size = tuple(featmaps.shape[-2:])
        if self.fcn is None:
            masks = torch.stack([area_resize(s["mask"][None], size)[0] for s in samples])
        else:
            with autocast(self.device, self.run.precision):
                masks = self.fcn(inputs, size)
        return {"featmap": featmaps.cpu().numpy(), "mask": masks.float().cpu().numpy(),
                "image_size": np.array([s["orig_size"] for s in samples], dtype=np.int32)}


def _worker_init(_: int) -> None:
    torch.set_num_threads(1)


def extract(extractor: RegionExtractor | SegmentExtractor, all_items: Sequence[ImageItem], out: str | None,
            part: Part | None = None, shard: str | None = None) -> dict[str, int]:
    """Run `extractor` over the items of `part` of `all_items` (all without) through the runner and write the
    features file `out` (None = stdout): `--shard`'s own file, or this process's part of a set
    (vltools.io.shards). Bad images are skipped and recorded in /failed (fatal with `strict`). Returns counts."""
    run = extractor.run
    check_output(out, run.resume)
    if runner.finished_part(out, part, run.resume):
        with FeaturesReader(out) as kept:
            return {"written": len(kept), "failed": len(kept.failed)}
    items = runner.part_ids(all_items, part, run.batch_size)
    whole = (shard or "0/1") if part is None or not part.in_folder else part.whole
    attrs = {**extractor.attrs(all_items), "shard": whole,
             **(part.attrs(len(all_items), run.batch_size) if part is not None else {})}
    by_id = {item.image_id: item for item in items}
    digests = {item.image_id: extractor.item_digest(item) for item in items}
    failed: list[str] = []
    options = {**comparable_attrs(attrs), "dtype": run.dtype}
    with runner.checkpoint(out, Rows(run.dtype, field_dtypes(run.dtype), "image id"), options, digests, run.resume,
                           run.commit_seconds) as kept:
        runner.run(extractor.stage, list(by_id), kept,
                   lambda todo: _decoded_batches(extractor, [by_id[i] for i in todo], failed), "images",
                   run.batch_size)
        if items and not kept.done:
            kept.discard()
            image_id, reason = failed[0].split("\t", 1)
            raise VLToolsError(f"every one of the {len(items)} images failed (first: {image_id}: {reason}); "
                               "nothing to write")
        try:
            with written(out) as target:
                count = write_features(target, attrs, run.dtype, kept.gather(list(by_id)), failed)
        except OutputError as exc:
            if not runner.resumable(out):
                raise
            raise OutputError(f"{exc}; the {len(kept.done)} finished images are kept in {kept.folder}: rerun with "
                              "--resume to write them") from exc
        kept.remove()
    runner.report_skipped(extractor.stage, out, count, failed)
    return {"written": count, "failed": len(failed)}


def _decoded_batches(extractor: RegionExtractor | SegmentExtractor, todo: list[ImageItem],
                     failed: list[str]) -> Iterator[tuple[list[str], dict[str, np.ndarray]]]:
    """Decode (in workers) and extract every item of `todo`: (ids, arrays) per batch; bad images go to `failed`."""
    run = extractor.run
    loader = torch.utils.data.DataLoader(
        extractor.dataset(todo), batch_size=run.batch_size, num_workers=run.workers, collate_fn=collate_items,
        pin_memory=extractor.device.type == "cuda", worker_init_fn=_worker_init if run.workers else None)
    with torch.inference_mode():
        for batch in loader:
            good = []
            for sample in batch:
                item = todo[sample["index"]]
                if "error" in sample:
                    if run.strict:
                        raise input_error(item.path, f"image {item.image_id!r}", sample["error"],
                                          "fix or remove it, or run without --strict to skip bad images")
                    failed.append(f"{item.image_id}\t{sample['error']}")
                else:
                    good.append(sample)
            if good:
                good_items = [todo[s["index"]] for s in good]
                yield [item.image_id for item in good_items], extractor(good, good_items)


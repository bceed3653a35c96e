"""What `extract-regions` runs, for the command and the Python API alike: the extractor its options choose
(a torchvision backbone over detector boxes, grid cells or given boxes; or the bottom-up-attention detector)
over the images of its inputs, through the one runner, into a features file."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from vltools.errors import VLToolsError, argument
from vltools.infer import checks
from vltools.infer.bottom_up import BottomUpExtractor
from vltools.infer.extract import RegionExtractor, extract
from vltools.infer.runner import check_output
from vltools.infer.settings import (
    BACKBONE_NAMES,
    BOTTOM_UP_WEIGHTS,
    GLOBAL_POOLS,
    REGION_KINDS,
    RunOptions,
    parse_shard,
)
from vltools.vision.images import list_inputs, shard_items


@dataclass
class RegionOptions:
    """Which regions and vectors: see `vltools extract-regions --help` for each option's meaning."""

    regions: str = "detector"
    global_pool: str | None = None
    image_size: int | None = None
    crop_size: int = 224
    num_regions: int | None = None
    min_regions: int | None = None
    max_regions: int | None = None
    score_threshold: float = 0.2
    detector_weights: str | None = None
    detector_vocab: str | None = None
    backbone: str = "resnet101"
    weights: str = "imagenet"

    def __post_init__(self) -> None:
        """Each option's type and range, as the command line's option types check them (vltools.infer.checks)."""
        checks.choice(self.regions, "regions", REGION_KINDS)
        checks.choice(self.global_pool, "global_pool", (*GLOBAL_POOLS, None))
        checks.optional_integer(self.image_size, "image_size", 16, checks.MAX_IMAGE_SIDE)
        checks.integer(self.crop_size, "crop_size", 16, checks.MAX_IMAGE_SIDE)
        for name in ("num_regions", "min_regions", "max_regions"):
            checks.optional_integer(getattr(self, name), name, 1)
        checks.number(self.score_threshold, "score_threshold", 0, 1)
        checks.text(self.detector_weights, "detector_weights", optional=True)
        checks.text(self.detector_vocab, "detector_vocab", optional=True)
        checks.choice(self.backbone, "backbone", BACKBONE_NAMES)
        checks.text(self.weights, "weights")

    @property
    def variable(self) -> bool:
        """Whether each image keeps its own number of regions (min/max) rather than a fixed K."""
        return self.min_regions is not None or self.max_regions is not None

    def problem(self) -> str | None:
        """What is wrong with this combination of options, in one line (None: nothing)."""
        if self.variable and self.num_regions is not None:
            return (f"give either {argument('num_regions')} (fixed K) or {argument('min_regions')}/"
                    f"{argument('max_regions')} (variable K)")
        if self.regions == "bottom-up" and (self.global_pool or self.image_size
                                            or (self.backbone, self.weights) != ("resnet101", "imagenet")):
            return (f"{argument('regions', 'bottom-up')} takes no {argument('global_pool')}, "
                    f"{argument('image_size')}, {argument('backbone')} or {argument('weights')}: its detector is "
                    "one network that resizes images as released")
        if self.detector_vocab and self.regions != "bottom-up":
            return (f"{argument('detector_vocab')} names the bottom-up detector's classes; it needs "
                    f"{argument('regions', 'bottom-up')}")
        return None


def extract_regions(inputs: Sequence[str | os.PathLike], output: str | os.PathLike | None,
                    options: RegionOptions | None = None, run: RunOptions | None = None,
                    shard: str | None = None) -> dict[str, int]:
    """Region features of the images of `inputs` (folders, image files, tar shards, path lists, images JSONL)
    written to `output` (None: standard output); returns the counts written and failed."""
    options = options or RegionOptions()
    run = run or RunOptions()
    if problem := options.problem():
        raise VLToolsError(problem)
    check_output(None if output is None else str(output), run.resume)
    all_items = list_inputs([str(path) for path in inputs])
    items = shard_items(all_items, parse_shard(shard))
    fixed = None if options.variable else options.num_regions or 36
    if options.regions == "bottom-up":
        extractor: RegionExtractor | BottomUpExtractor = BottomUpExtractor(
            run, options.detector_weights or BOTTOM_UP_WEIGHTS, fixed, options.min_regions or 10,
            options.max_regions or 100, options.score_threshold, options.detector_vocab)
    else:
        extractor = RegionExtractor(
            all_items, run, backbone=options.backbone, weights=options.weights, regions=options.regions,
            global_pool=options.global_pool, image_size=options.image_size, crop_size=options.crop_size,
            num_regions=fixed, min_regions=options.min_regions or 10, max_regions=options.max_regions or 100,
            score_threshold=options.score_threshold, detector_weights=options.detector_weights or "coco")
    return extract(extractor, all_items, items, None if output is None else str(output), shard)

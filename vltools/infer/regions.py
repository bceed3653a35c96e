"""What `extract-regions` runs, for the command and the Python API alike: the extractor its options choose
(a torchvision backbone over detector boxes, grid cells or given boxes; or the bottom-up-attention detector)
over the images of its inputs, through the one runner, into a features file."""

from __future__ import annotations

import os
from collections.abc import Sequence

from vltools.errors import VLToolsError
from vltools.infer.bottom_up import BottomUpExtractor
from vltools.infer.extract import RegionExtractor, extract
from vltools.infer.runner import check_output
from vltools.infer.settings import BOTTOM_UP_WEIGHTS, RegionOptions, RunOptions
from vltools.io.shards import Part
from vltools.vision.images import list_inputs


def extract_regions(inputs: Sequence[str | os.PathLike], output: str | os.PathLike | None,
                    options: RegionOptions | None = None, run: RunOptions | None = None,
                    part: Part | None = None, shard: str | None = None) -> dict[str, int]:
    """Region features of the images of `inputs` (folders, image files, tar shards, path lists, images JSONL)
    written to `output` (None: standard output); returns the counts written and failed."""
    options = options or RegionOptions()
    run = run or RunOptions()
    if problem := options.problem():
        raise VLToolsError(problem)
    check_output(None if output is None else str(output), run.resume)
    all_items = list_inputs([str(path) for path in inputs])
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
    return extract(extractor, all_items, None if output is None else str(output), part, shard)

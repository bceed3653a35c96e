"""`vltools extract-regions INPUT... [-o FEATS.h5]`: region (and global) features of images."""

from __future__ import annotations

import click

from vltools.commands.options import FiniteFloat, image_run_options, make_run
from vltools.infer.bottom_up import DEFAULT_WEIGHTS, BottomUpExtractor
from vltools.infer.extract import RegionExtractor, extract
from vltools.infer.runner import check_output
from vltools.vision.images import list_inputs, parse_shard, shard_items


@click.command("extract-regions")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--regions", type=click.Choice(("detector", "grid", "boxes", "none", "bottom-up")), default="detector",
              show_default=True, help="detector: Faster R-CNN boxes; grid: last-stage cells; boxes: the JSONL's "
                                      "'boxes' (original pixels); none: only --global; bottom-up: the bottom-up-"
                                      "attention features (Visual Genome detector, 2048-d, with labels and "
                                      "attributes) the released matching models were trained on.")
@click.option("--global", "global_pool", type=click.Choice(("avg", "rmac", "tencrop")),
              help="Add /global: average pooling, R-MAC (3 levels, no whitening), or SCO's 10-crop average.")
@click.option("--image-size", type=click.IntRange(min=16),
              help="Resize target: the shorter side (long side at most 5/3 of it) for detector and boxes "
                   "[600]; both sides for grid [448]; the long side for --regions none --global rmac [576].")
@click.option("--crop-size", type=click.IntRange(min=16), default=224, show_default=True,
              help="Crop side for --global tencrop (the shorter side is first resized to 8/7 of it).")
@click.option("--num-regions", type=click.IntRange(min=1),
              help="Detector: exactly this many boxes per image [36] (padded with the whole-image box); bottom-up: "
                   "the released fixed-36 features.")
@click.option("--min-regions", type=click.IntRange(min=1),
              help="Detector, variable K like the bottom-up features: at least this many boxes [10] ...")
@click.option("--max-regions", type=click.IntRange(min=1),
              help="... at most this many [100], those scoring >= --score-threshold; zero-padded, /num_regions.")
@click.option("--score-threshold", type=FiniteFloat(min=0, max=1), default=0.2, show_default=True)
@click.option("--detector-weights",
              help="detector: coco (torchvision COCO_V1) [default], none (random, for tests) or PATH to a state "
                   "dict; bottom-up: the checkpoint of `vltools convert bottom-up-weights` or its model-store name "
                   f"[{DEFAULT_WEIGHTS}, registered by bin/fetch_bottom_up_weights.sh].")
@click.option("--detector-vocab", type=click.Path(exists=True, file_okay=False),
              help="bottom-up: the folder of the released objects_vocab.txt and attributes_vocab.txt, stored as the "
                   "label_names and attribute_names attributes (without it, /labels and /attributes are indices).")
@image_run_options
def command(inputs: tuple[str, ...], regions: str, global_pool: str | None, image_size: int | None,
            crop_size: int, num_regions: int | None, min_regions: int | None, max_regions: int | None,
            score_threshold: float, detector_weights: str | None, detector_vocab: str | None, output: str | None,
            backbone: str, weights: str, shard: str | None, **run: object) -> None:
    """Region features of the images in INPUT (an image folder, recursive, ids = relative paths; image files,
    ids = file names; an uncompressed tar of images such as a webdataset shard, ids = member names; a text file
    of image paths; or an `images` JSONL with image_id, path and optional boxes) as a features HDF5.

    Bad images are skipped, listed on standard error and in the output's /failed dataset."""
    variable = min_regions is not None or max_regions is not None
    if variable and num_regions is not None:
        raise click.UsageError("give either --num-regions (fixed K) or --min-regions/--max-regions (variable K)")
    if regions == "bottom-up" and (global_pool or image_size or (backbone, weights) != ("resnet101", "imagenet")):
        raise click.UsageError("--regions bottom-up takes no --global, --image-size, --backbone or --weights: its "
                               "detector is one network that resizes images as released")
    if detector_vocab and regions != "bottom-up":
        raise click.UsageError("--detector-vocab names the bottom-up detector's classes; it needs --regions bottom-up")
    check_output(output, bool(run["resume"]))
    all_items = list_inputs(inputs)
    items = shard_items(all_items, parse_shard(shard))
    if regions == "bottom-up":
        extractor: RegionExtractor | BottomUpExtractor = BottomUpExtractor(
            make_run(**run), detector_weights or DEFAULT_WEIGHTS, None if variable else num_regions or 36,
            min_regions or 10, max_regions or 100, score_threshold, detector_vocab)
    else:
        extractor = RegionExtractor(
            all_items, make_run(**run), backbone=backbone, weights=weights, regions=regions, global_pool=global_pool,
            image_size=image_size, crop_size=crop_size, num_regions=None if variable else num_regions or 36,
            min_regions=min_regions or 10, max_regions=max_regions or 100, score_threshold=score_threshold,
            detector_weights=detector_weights or "coco")
    extract(extractor, all_items, items, output, shard)

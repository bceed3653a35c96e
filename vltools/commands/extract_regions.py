"""`vltools extract-regions INPUT... [-o FEATS.h5]`: region (and global) features of images."""

from __future__ import annotations

import click

from vltools.commands.options import image_run_options, make_run
from vltools.infer.extract import RegionExtractor, check_output, extract
from vltools.vision.images import list_inputs, parse_shard, shard_items


@click.command("extract-regions")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--regions", type=click.Choice(("detector", "grid", "boxes", "none")), default="detector",
              show_default=True, help="detector: Faster R-CNN boxes; grid: last-stage cells; boxes: the JSONL's "
                                      "'boxes' (original pixels); none: only --global.")
@click.option("--global", "global_pool", type=click.Choice(("avg", "rmac", "tencrop")),
              help="Add /global: average pooling, R-MAC (3 levels, no whitening), or SCO's 10-crop average.")
@click.option("--image-size", type=click.IntRange(min=16),
              help="Resize target: the shorter side (long side at most 5/3 of it) for detector and boxes "
                   "[600]; both sides for grid [448]; the long side for --regions none --global rmac [576].")
@click.option("--crop-size", type=click.IntRange(min=16), default=224, show_default=True,
              help="Crop side for --global tencrop (the shorter side is first resized to 8/7 of it).")
@click.option("--num-regions", type=click.IntRange(min=1),
              help="Detector: exactly this many boxes per image [36] (padded with the whole-image box).")
@click.option("--min-regions", type=click.IntRange(min=1),
              help="Detector, variable K like the bottom-up features: at least this many boxes [10] ...")
@click.option("--max-regions", type=click.IntRange(min=1),
              help="... at most this many [100], those scoring >= --score-threshold; zero-padded, /num_regions.")
@click.option("--score-threshold", type=float, default=0.2, show_default=True)
@click.option("--detector-weights", default="coco", show_default=True,
              help="coco (torchvision COCO_V1), none (random, for tests) or PATH to a state dict.")
@image_run_options
def command(inputs: tuple[str, ...], regions: str, global_pool: str | None, image_size: int | None,
            crop_size: int, num_regions: int | None, min_regions: int | None, max_regions: int | None,
            score_threshold: float, detector_weights: str, output: str | None, backbone: str, weights: str,
            shard: str | None, **run: object) -> None:
    """Region features of the images in INPUT (an image folder, recursive, ids = relative paths; a text file
    of image paths; or an `images` JSONL with image_id, path and optional boxes) as a features HDF5.

    Bad images are skipped, listed on standard error and in the output's /failed dataset."""
    variable = min_regions is not None or max_regions is not None
    if variable and num_regions is not None:
        raise click.UsageError("give either --num-regions (fixed K) or --min-regions/--max-regions (variable K)")
    check_output(output, bool(run["resume"]))
    all_items = list_inputs(inputs)
    items = shard_items(all_items, parse_shard(shard))
    extractor = RegionExtractor(
        all_items, make_run(**run), backbone=backbone, weights=weights, regions=regions, global_pool=global_pool,
        image_size=image_size, crop_size=crop_size, num_regions=None if variable else num_regions or 36,
        min_regions=min_regions or 10, max_regions=max_regions or 100, score_threshold=score_threshold,
        detector_weights=detector_weights)
    extract(extractor, all_items, items, output, shard)

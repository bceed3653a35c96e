"""`vltools extract-regions INPUT... [-o FEATS.h5]`: region (and global) features of images."""

from __future__ import annotations

import click

from vltools.errors import VLToolsError
from vltools.vision.extraction import RegionExtractor, RunOptions, check_output, extract
from vltools.vision.images import DEFAULT_MAX_PIXELS, list_inputs, parse_shard, shard_items

BACKBONE_NAMES = ("resnet101", "resnet152", "resnet50", "resnet18", "vgg19")


def _check_shard(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A malformed --shard is a usage error (exit 2), found before any model is built."""
    try:
        parse_shard(value)
    except VLToolsError as exc:
        raise click.BadParameter(str(exc).split(": ", 1)[-1]) from None
    return value


def run_options(func):
    """The options every image-extraction stage shares (devices, batching, output dtype, resume, shard)."""
    options = [
        click.option("-o", "--output", "output", type=click.Path(dir_okay=False),
                     help="Output features HDF5 (default: standard output)."),
        click.option("--backbone", type=click.Choice(BACKBONE_NAMES), default="resnet101", show_default=True,
                     help="Torchvision network; features come from its last convolutional stage."),
        click.option("--weights", default="imagenet", show_default=True,
                     help="imagenet (torchvision IMAGENET1K_V1), imagenet-v2 (ResNet-50/101/152), none (random, "
                          "for tests), or PATH to a torchvision-layout state dict or a vltools checkpoint."),
        click.option("--batch-size", type=click.IntRange(min=1), default=8, show_default=True),
        click.option("--workers", type=click.IntRange(min=0), default=2, show_default=True,
                     help="DataLoader processes decoding images while the model runs (0 = decode in-process)."),
        click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:K."),
        click.option("--precision", type=click.Choice(("fp32", "bf16", "fp16")), default="fp32", show_default=True,
                     help="Compute precision of the forward passes (autocast)."),
        click.option("--dtype", type=click.Choice(("float16", "float32")), default="float16", show_default=True,
                     help="Storage type of the feature datasets."),
        click.option("--strict", is_flag=True, help="Stop with an error at the first unreadable image (exit 1, "
                                                    "no output) instead of skipping it."),
        click.option("--resume", is_flag=True, help="Continue an interrupted run with the same -o and options; "
                                                    "images already done (in OUT.partial/) are not recomputed."),
        click.option("--checkpoint-seconds", type=click.FloatRange(min=0), default=60.0, show_default=True,
                     help="How often finished rows are made durable in OUT.partial/ for --resume."),
        click.option("--shard", metavar="I/N", callback=_check_shard,
                     help="Process every N-th image starting at I (0 <= I < N) of the input list; join the "
                          "shards with `vltools merge`."),
        click.option("--max-pixels", type=click.IntRange(min=1), default=DEFAULT_MAX_PIXELS, show_default=True,
                     help="Images with more pixels are skipped as possible decompression bombs."),
        click.option("--seed", type=int, default=0, show_default=True,
                     help="Seed of random initialisation (--weights none)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def make_run(batch_size: int, workers: int, device: str, precision: str, dtype: str, strict: bool, resume: bool,
             checkpoint_seconds: float, max_pixels: int, seed: int) -> RunOptions:
    """RunOptions from the shared command-line options."""
    return RunOptions(batch_size=batch_size, workers=workers, device=device, precision=precision, dtype=dtype,
                      strict=strict, resume=resume, commit_seconds=checkpoint_seconds, max_pixels=max_pixels,
                      seed=seed)


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
@run_options
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

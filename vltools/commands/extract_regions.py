"""`vltools extract-regions INPUT... [-o FEATS.h5]`: region (and global) features of images."""

from __future__ import annotations

import click

from vltools.commands.inputs import InputFile
from vltools.commands.options import FiniteFloat, Integer, image_run_options, image_side, primary_output
from vltools.infer.settings import BOTTOM_UP_WEIGHTS, GLOBAL_POOLS, REGION_KINDS
from vltools.io.released import registered_by


@primary_output("output", stdout=True, locks=False)
@click.command("extract-regions")
@click.argument("inputs", nargs=-1, required=True, type=InputFile("images"))
@click.option("--regions", type=click.Choice(REGION_KINDS), default="detector",
              show_default=True, help="detector: Faster R-CNN boxes; grid: last-stage cells; boxes: the JSONL's "
                                      "'boxes' (original pixels); none: only --global; bottom-up: the bottom-up-"
                                      "attention features (Visual Genome detector, 2048-d, with labels and "
                                      "attributes) the released matching models were trained on.")
@click.option("--global", "global_pool", type=click.Choice(GLOBAL_POOLS),
              help="Add /global: average pooling, R-MAC (3 levels, no whitening), or SCO's 10-crop average.")
@click.option("--image-size", type=image_side(),
              help="Resize target: the shorter side (long side at most 5/3 of it) for detector and boxes "
                   "[600]; both sides for grid [448]; the long side for --regions none --global rmac [576].")
@click.option("--crop-size", type=image_side(), default=224, show_default=True,
              help="Crop side for --global tencrop (the shorter side is first resized to 8/7 of it).")
@click.option("--num-regions", type=Integer(min=1),
              help="Detector: exactly this many boxes per image [36] (padded with the whole-image box); bottom-up: "
                   "the released fixed-36 features.")
@click.option("--min-regions", type=Integer(min=1),
              help="Detector, variable K like the bottom-up features: at least this many boxes [10] ...")
@click.option("--max-regions", type=Integer(min=1),
              help="... at most this many [100], those scoring >= --score-threshold; zero-padded, /num_regions.")
@click.option("--score-threshold", type=FiniteFloat(min=0, max=1), default=0.2, show_default=True)
@click.option("--detector-weights",
              help="detector: coco (torchvision COCO_V1) [default], none (random, for tests) or PATH to a state "
                   "dict; bottom-up: the checkpoint of `vltools convert bottom-up-weights` or its model-store name "
                   f"[{BOTTOM_UP_WEIGHTS}]; the released detectors are registered by "
                   f"{registered_by('detector_weights')}.")
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
    of image paths; an `images` JSONL with image_id, path and optional boxes; or a Hugging Face dataset, a
    save_to_disk folder or parquet files, ids = its id column as `convert hf` gives them) as a features HDF5.

    Bad images are skipped, listed on standard error and in the output's /failed dataset."""
    from vltools.stages.extract_regions import extract_regions

    extract_regions(inputs, "-" if output is None else output, regions=regions, global_pool=global_pool,
                    image_size=image_size, crop_size=crop_size, num_regions=num_regions, min_regions=min_regions,
                    max_regions=max_regions, score_threshold=score_threshold, detector_weights=detector_weights,
                    detector_vocab=detector_vocab, backbone=backbone, weights=weights, shard=shard, **run)

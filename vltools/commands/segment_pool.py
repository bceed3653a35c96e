"""`vltools segment-pool INPUT... [-o FEATS.h5]`: backbone feature maps and foreground masks for L2C."""

from __future__ import annotations

from pathlib import Path

import click

from vltools.commands.inputs import InputFile
from vltools.commands.options import image_run_options, image_side, make_run, primary_output
from vltools.infer.settings import locked_part


@primary_output("output", stdout=True, locks=False)
@click.command("segment-pool")
@click.argument("inputs", nargs=-1, required=True, type=InputFile("images"))
@click.option("--image-size", type=image_side(), default=448, show_default=True,
              help="Images are resized to this square (rounded up to a multiple of the backbone stride).")
@click.option("--class", "class_name", default="bird", show_default=True,
              help="VOC class of the FCN foreground mask, by name or index (bird = 3).")
@click.option("--seg-weights", default="coco-voc", show_default=True,
              help="FCN ResNet-101 weights: coco-voc (torchvision COCO_WITH_VOC_LABELS_V1), none (random, for "
                   "tests) or PATH to a state dict.")
@click.option("--masks", "mask_dir", type=click.Path(exists=True, file_okay=False),
              help="Read masks instead of running the FCN: DIR/<id without extension>.png, same size as the "
                   "image, 8-bit (/255) or 0/1.")
@image_run_options
def command(inputs: tuple[str, ...], image_size: int, class_name: str, seg_weights: str, mask_dir: str | None,
            output: str | None, backbone: str, weights: str, shard: str | None, **run: object) -> None:
    """For each image of INPUT (folder, image files, tar of images, list of paths or `images` JSONL): the
    backbone feature map F as /featmap (N, D, h, w) and the foreground mask B at the same h x w as /mask (N, h, w),
    values in [0, 1]: the input of L2C's segmentation-based pooling."""
    from vltools.infer.extract import SegmentExtractor, extract
    from vltools.infer.runner import check_output
    from vltools.vision.images import list_inputs
    from vltools.vision.masks import parse_class

    with locked_part(output, shard, "h5") as (target, part):
        check_output(target, bool(run["resume"]))
        all_items = list_inputs(inputs)
        extractor = SegmentExtractor(make_run(**run), backbone=backbone, weights=weights, image_size=image_size,
                                     class_index=parse_class(class_name), seg_weights=seg_weights,
                                     mask_dir=Path(mask_dir) if mask_dir else None)
        extract(extractor, all_items, target, part, shard)

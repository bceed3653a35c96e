"""`vltools synth-backbone WORLD -o WEIGHTS.pt`: a backbone trained on the synthetic world's own labels."""

from __future__ import annotations

import click

from vltools.commands.options import (
    SEED_RANGE,
    FiniteFloat,
    Integer,
    device_option,
    image_side,
    output_option,
    primary_output,
    threads_option,
)
from vltools.infer.settings import BACKBONE_NAMES
from vltools.io.progress import log
from vltools.training.config import BACKBONE


@primary_output("output")
@click.command("synth-backbone")
@click.argument("world", type=click.Path(file_okay=False))
@output_option("-o", "--output", required=True, type=click.Path(dir_okay=False),
               help="The trained weights: a torchvision state dict without the classification head.")
@click.option("--backbone", type=click.Choice(BACKBONE_NAMES), default="resnet18", show_default=True,
              help="Torchvision network to train (the recipes' synthetic runs use resnet18).")
@click.option("--image-size", type=image_side(32), default=BACKBONE.image_size, show_default=True,
              help="Images are resized to this square for training.")
@click.option("--epochs", type=Integer(min=1), default=BACKBONE.epochs, show_default=True,
              help="Passes over the training images; the last one at a tenth of the learning rate.")
@click.option("--batch-size", type=Integer(min=2), default=BACKBONE.batch_size, show_default=True,
              help="Images per step.")
@click.option("--lr", type=FiniteFloat(min=0, min_open=True), default=BACKBONE.lr, show_default=True,
              help="Adam's learning rate.")
@click.option("--seed", type=SEED_RANGE, default=0, show_default=True,
              help="Seed of initialisation, data order and flips: the same seed and options give the same file "
                   "on the same CPU with the same number of threads.")
@device_option()
@threads_option()
def command(world: str, output: str, backbone: str, image_size: int, epochs: int, batch_size: int, lr: float,
            seed: int, device: str) -> None:
    """Train a backbone to name the shape, colour, size and position of every object of the synthetic world WORLD
    (a folder `vltools synth` wrote) from the object's box, and write it to -o: `--backbone resnet18 --weights
    WEIGHTS.pt` then gives every stage toy features that carry what the world's captions talk about, as ImageNet
    weights do for photos (a random network's barely tell the colours apart). Trains on the train split of every
    image set of WORLD, keeps the epoch with the best accuracy on the val split; about a minute on a 2-core CPU
    for a world of 1,000 images."""
    from vltools.training.synth_backbone import train_synth_backbone

    metrics = train_synth_backbone(world, output, backbone=backbone, image_size=image_size, epochs=epochs,
                                   batch_size=batch_size, lr=lr, seed=seed, device=device)
    log.info("synth-backbone: wrote %s (%s); validation accuracy %s", output, backbone,
             ", ".join(f"{name} {value:.1f}%" for name, value in metrics.items() if name != "accuracy"))

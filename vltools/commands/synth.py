"""`vltools synth OUT/`: write the deterministic synthetic world (images, masks, captions, regions, pairs)."""

from __future__ import annotations

import click

from vltools.commands.options import SEED_RANGE, FiniteFloat, Integer, primary_output
from vltools.io.progress import log


@primary_output("out")
@click.command("synth")
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--seed", type=SEED_RANGE, default=0, show_default=True,
              help="Random seed; same seed and options, same files.")
@click.option("--images", type=Integer(min=10), default=1000, show_default=True, help="Images in the main set.")
@click.option("--pairs", type=Integer(min=0), default=400, show_default=True,
              help="Image pairs with difference descriptions (0: none).")
@click.option("--aux-images", type=Integer(min=0), default=1000, show_default=True,
              help="Images with single-image captions for the auxiliary task (0: none).")
@click.option("--size", type=Integer(48, 1024), default=96, show_default=True, help="Image side in pixels.")
@click.option("--edit-fraction", type=FiniteFloat(min=0, max=1, max_open=True), default=0.4, show_default=True,
              help="About this fraction of main images are one-change edits of another (near-duplicates).")
@click.option("--force", is_flag=True, help="Replace OUT if it holds an earlier synthetic world.")
def command(out: str, seed: int, images: int, pairs: int, aux_images: int, size: int, edit_fraction: float,
            force: bool) -> None:
    """Write a toy world of coloured shapes into the new folder OUT in vltools' formats: images and masks,
    images.jsonl (boxes), captions.jsonl (5 per image), regions.jsonl, pairs.jsonl, aux_captions.jsonl,
    README.txt. See OUT/README.txt for the grammar and the files."""
    from vltools.synth.world import WorldOptions, write_world

    options = WorldOptions(seed=seed, images=images, pairs=pairs, aux_images=aux_images, size=size,
                           edit_fraction=edit_fraction)
    counts = write_world(out, options, force=force)
    main, pair_set, aux = counts["main"], counts["pairs"], counts["aux"]
    summary = (f"synth: wrote {out}: {main['images']} images ({main['edits']} near-duplicate edits), "
               f"{main['captions']} captions, {main['regions']} region captions")
    if pair_set:
        summary += f", {pair_set['pairs']} pairs ({pair_set['descriptions']} descriptions)"
    if aux:
        summary += f", {aux['images']} aux images ({aux['captions']} captions)"
    log.info(summary)

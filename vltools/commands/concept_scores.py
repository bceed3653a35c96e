"""`vltools concept-scores IMAGES --model CONCEPTS.pt`: SCO's concept score vector p of every image (features HDF5)."""

from __future__ import annotations

import click

from vltools.commands.inputs import InputFile
from vltools.commands.options import (
    batch_size_option,
    device_option,
    image_side,
    output_option,
    precision_option,
    primary_output,
    resume_option,
    shard_option,
    threads_option,
    workers_option,
)
from vltools.errors import VLToolsError
from vltools.infer.checks import MAX_GRID_LEVEL
from vltools.infer.settings import CONCEPT_LEVELS, RunOptions, locked_part
from vltools.vision.limits import DEFAULT_MAX_PIXELS


def _levels(ctx: click.Context, param: click.Parameter, text: str) -> tuple[int, ...]:
    """--levels as grid sizes, checked at parse time."""
    try:
        levels = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise click.BadParameter(f"{text!r}: give comma-separated grid sizes such as 1,2,3,6") from None
    if not levels or min(levels) < 1 or max(levels) > MAX_GRID_LEVEL:
        raise click.BadParameter(f"{text!r}: grid sizes are integers from 1 to {MAX_GRID_LEVEL}")
    return levels


@primary_output("output", stdout=True, locks=False)
@click.command("concept-scores")
@click.argument("inputs", nargs=-1, required=True, type=InputFile("images"))
@click.option("--model", "model_path", required=True, type=InputFile("checkpoint"),
              help="A concept CNN checkpoint (vltools train --model concepts).")
@output_option("-o", "--output", type=click.Path(), binary="HDF5",
               help="Features HDF5, or a folder of parts (--shard I/N, torchrun) (default: standard output, never a "
                    "terminal).")
@click.option("--concepts", "concepts_path", type=click.Path(dir_okay=False),
              help="Check that this concepts file is the one the CNN was trained on (same K and concepts).")
@click.option("--levels", default=",".join(map(str, CONCEPT_LEVELS)), show_default=True, callback=_levels,
              help="Grid levels n: n x n half-overlapping windows each; r = sum of n^2 (1,2,3,6 gives 50).")
@click.option("--image-size", type=image_side(), default=448, show_default=True,
              help="Images are resized to this square before the windows are cut.")
@click.option("--crop-size", type=image_side(),
              help="Side of each region crop fed to the CNN [the checkpoint's training size].")
@batch_size_option(8, "Images a batch (times r crops through the CNN).")
@workers_option(2)
@device_option()
@precision_option()
@click.option("--strict", is_flag=True, help="Stop at the first unreadable image instead of skipping it.")
@resume_option(items="images")
@shard_option()
@threads_option()
def command(inputs: tuple[str, ...], model_path: str, output: str | None, concepts_path: str | None,
            levels: tuple[int, ...], image_size: int, crop_size: int | None, batch_size: int, workers: int,
            device: str, precision: str, strict: bool, resume: bool, checkpoint_seconds: float,
            shard: str | None) -> None:
    """Write /global = p (N, K) for the images of INPUTS (folder, image files, tar of images, list file or images
    JSONL): each image's r grid regions scored by the concept CNN, max-pooled element-wise over the regions. SCO
    trains on this file."""
    from vltools.infer.concept_scores import ConceptScorer
    from vltools.infer.extract import extract
    from vltools.infer.loader import load_model
    from vltools.infer.runner import check_output
    from vltools.io.checkpoints import TASK_SETTINGS, checkpoint_field, file_digest
    from vltools.io.fields import INTEGER
    from vltools.text.concepts import ConceptVocabulary
    from vltools.vision.images import list_inputs

    with locked_part(output, shard, "h5") as (target, part):
        check_output(target, resume)
        loaded = load_model(model_path, "concepts")
        model, payload = loaded.model, loaded.payload
        concepts = list(payload.get("vocab") or [])
        if concepts_path is not None:
            given = ConceptVocabulary.load(concepts_path)
            if given.concepts != concepts:
                raise VLToolsError(f"{concepts_path}: has K={len(given)} concepts but {model_path} was trained on "
                                   f"K={len(concepts)} {'(other concepts)' if len(given) == len(concepts) else ''}; "
                                   "use the concepts file the CNN was trained with")
        train_size = checkpoint_field(payload, f"{TASK_SETTINGS}.image_size", INTEGER, model_path, 224)
        run = RunOptions(batch_size=batch_size, workers=workers, device=device, precision=precision,
                         dtype="float32", strict=strict, resume=resume, commit_seconds=checkpoint_seconds,
                         max_pixels=DEFAULT_MAX_PIXELS)
        info = {"backbone": loaded.settings["backbone"], "checkpoint": model_path,
                "checkpoint_digest": file_digest(model_path), "concepts": " ".join(concepts)}
        scorer = ConceptScorer(model, info, run, image_size, crop_size or train_size, levels)
        all_items = list_inputs(inputs)
        extract(scorer, all_items, target, part, shard)

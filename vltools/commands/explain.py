"""`vltools explain`: Grad-CAM pictures of what makes ranked image pairs similar (Gordo & Larlus Figure 3)."""

from __future__ import annotations

from pathlib import Path

import click

from vltools.commands.inputs import InputFile
from vltools.commands.options import Integer, image_side, primary_output, threads_option
from vltools.errors import VLToolsError
from vltools.io.progress import log


@primary_output("out_dir")
@click.command("explain")
@click.argument("rankings", metavar="RANKINGS.jsonl", type=InputFile("jsonl", stdin=True))
@click.option("--model", "model_path", required=True, type=InputFile("checkpoint"), metavar="CKPT",
              help="The rmac checkpoint that ranked them.")
@click.option("--images", "images_path", required=True, type=click.Path(), help="Images JSONL, folder or list.")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder for the PNG files (created).")
@click.option("--queries", type=Integer(min=1), default=10, show_default=True,
              help="Explain the pairs of the first N queries.")
@click.option("--top", type=Integer(min=1), default=1, show_default=True, help="Results per query.")
@click.option("--k", type=Integer(min=1), default=5, show_default=True,
              help="Signature dimensions (largest contributions to the similarity) whose gradient is followed.")
@click.option("--image-size", type=image_side(32), help="Longest image side [the training one].")
@threads_option()
def command(rankings: str, model_path: str, images_path: str, out_dir: str, queries: int, top: int, k: int,
            image_size: int | None) -> None:
    """For each of the first --queries i2i rankings (vltools match) and its --top results, write
    OUT/<query>__<result>.png (a "/" in an id becomes "_"): the two images side by side, the regions that
    contributed most to their similarity highlighted in red."""
    from vltools.io.checkpoints import TASK_SETTINGS, checkpoint_field, load_checkpoint
    from vltools.io.fields import INTEGER
    from vltools.io.output import written
    from vltools.io.records import id_file_name, read_records
    from vltools.models import model_from_checkpoint
    from vltools.vision.embedding import ImageStore
    from vltools.vision.gradcam import overlay, pair_heatmaps, side_by_side
    from vltools.vision.images import list_inputs

    records = [r for r in read_records(rankings, "rankings") if r["direction"] == "i2i"][:queries]
    if not records:
        raise VLToolsError(f"{rankings}: no i2i rankings; rank images for images first: `vltools encode IMAGES "
                           f"--model {model_path} -o EMB.h5`, then `vltools match EMB.h5 EMB.h5 -o I2I.jsonl`")
    payload = load_checkpoint(model_path)
    if payload.get("model") != "rmac":
        raise VLToolsError(f"{model_path}: explain needs an rmac checkpoint, not {payload.get('model')!r}")
    model = model_from_checkpoint(payload, model_path)
    items = {item.image_id: item for item in list_inputs([images_path])}
    pairs = [(r["query"], other) for r in records for other in r["ids"][:top]]
    missing = sorted({i for pair in pairs for i in pair if i not in items})
    if missing:
        raise VLToolsError(f"{images_path}: {len(missing)} ranked images are not in it, e.g. {missing[0]!r}")
    size = image_size or checkpoint_field(payload, f"{TASK_SETTINGS}.image_size", INTEGER, model_path, 576)
    wanted = sorted({i for pair in pairs for i in pair})
    store = ImageStore([items[i] for i in wanted], size, cache=True)
    position = {image_id: n for n, image_id in enumerate(wanted)}
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    for first, second in pairs:
        image_a, image_b = store.image(position[first]), store.image(position[second])
        cam_a, cam_b, similarity = pair_heatmaps(model, image_a, image_b, k)
        picture = side_by_side(overlay(image_a, cam_a), overlay(image_b, cam_b))
        name = id_file_name([first, second], ".png")
        with written(folder / name) as tmp:
            picture.save(tmp, format="PNG")
        log.info("%s ~ %s: similarity %.3f -> %s", first, second, similarity, folder / name)

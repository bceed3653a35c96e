"""`vltools synth-backbone`: a backbone that knows the synthetic world, trained on the world's own labels.

A torchvision backbone (ResNet-18 by default: the recipes' toy extractor) and one linear layer learn to name the
shape, colour, size and position of every object of the world's training images (vltools.synth.labels) from the
object's box, RoI-pooled from the feature map of the whole image: the concept CNN scoring boxes
(vltools.models.concepts), binary cross-entropy over the labels. Boxes rather than whole-image labels (the concept
CNN task) because boxes and grid cells are what the recipes read: with the same budget (4 epochs of 1,600 images
at 96 pixels, no positions), the box-trained features told held-out objects' colours and sizes apart 98% and 95%
of the time (nearest class mean of the box features), the whole-image-trained ones 92% and 83%, a random
network's 16% and 59%. Shapes come last: after about three times that budget (`--epochs`). Images are flipped
horizontally at random, mirroring boxes and positions (each image's flip in each epoch drawn from the seed).

Every image set of the world takes part (main, pair and auxiliary images): the `train` split trains and the `val`
split picks the best epoch (the mean over the four attributes of the accuracy of the best-scored label of each
validation object); test images are never seen. The loop is the shared trainer (vltools.training.trainer), whose
checkpoint stays in a temporary folder: what is written is the trunk of the best epoch as a torchvision state dict
without its head, so that `--backbone resnet18 --weights PATH` loads it in every stage and records its digest.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from vltools.devices import resolve_device
from vltools.errors import VLToolsError
from vltools.io.checkpoints import load_checkpoint, save_state_dict
from vltools.io.progress import labelled
from vltools.io.provenance import ids_digest
from vltools.io.records import read_records
from vltools.io.scratch import scratch_folder
from vltools.models import model_from_checkpoint, schema_version
from vltools.models.concepts import build_concept_cnn, concept_loss
from vltools.synth.labels import LABELS, attribute_columns, object_targets
from vltools.synth.world import is_world
from vltools.training.config import BACKBONE, TRAIN_DEFAULTS, build_config
from vltools.training.distributed import Distributed
from vltools.training.state import seed_everything
from vltools.training.tasks.concepts import SquareImages
from vltools.training.trainer import train
from vltools.vision.backbones import check_image_size, normalize, trunk_state_dict
from vltools.vision.images import ImageItem, list_inputs

IMAGE_SETS = ("images.jsonl", "pair_images.jsonl", "aux_images.jsonl")  # a world's image sets, where present


def world_split(world: str | os.PathLike, split: str) -> tuple[list[ImageItem], list[dict]]:
    """The images of `split` in every image set of the synthetic world folder `world`, with their records."""
    folder = Path(world)
    if not is_world(folder):
        raise VLToolsError(f"{folder}: not a synthetic world (no README.txt written by vltools synth); give the "
                           "folder `vltools synth` wrote")
    items, records = [], []
    for name in IMAGE_SETS:
        if (folder / name).is_file():
            chosen = [record for record in read_records(folder / name, "images") if record.get("split") == split]
            listed = {item.image_id: item for item in list_inputs([folder / name])}
            items += [listed[record["image_id"]] for record in chosen]
            records += chosen
    return items, records


class WorldObjects(SquareImages):
    """Images resized to `image_size` squares with their objects' boxes (in those pixels) and label targets;
    `flip` mirrors an image, its boxes and its positions at random (training), as `seed` draws it each epoch."""

    def __init__(self, items: Sequence[ImageItem], records: Sequence[dict], image_size: int, flip: bool,
                 seed: int = 0) -> None:
        super().__init__(items, image_size, flip, seed)
        self.records = list(records)

    def __getitem__(self, index: int) -> dict:
        image, (height, width), flipped = self.image(index)
        objects = self.records[index]["objects"]
        scale = torch.tensor([self.size / width, self.size / height] * 2)
        boxes = torch.tensor([obj["box"] for obj in objects], dtype=torch.float32) * scale
        if flipped:
            boxes = torch.stack([self.size - boxes[:, 2], boxes[:, 1], self.size - boxes[:, 0], boxes[:, 3]], dim=1)
        return {"image": image, "boxes": boxes, "targets": torch.from_numpy(object_targets(objects, flipped))}


def collate_objects(items: Sequence[dict]) -> dict[str, torch.Tensor]:
    """Normalised images, boxes padded to the most objects of an image (`counts` per image), targets of all boxes."""
    counts = torch.tensor([len(item["boxes"]) for item in items])
    boxes = torch.zeros(len(items), int(counts.max()), 4)
    for row, item in enumerate(items):
        boxes[row, :len(item["boxes"])] = item["boxes"]
    return {"images": normalize(torch.stack([item["image"] for item in items])), "boxes": boxes, "counts": counts,
            "targets": torch.cat([item["targets"] for item in items])}


def box_lists(batch: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """The padded boxes of a batch as one (K_b, 4) tensor per image."""
    return [boxes[:count] for boxes, count in zip(batch["boxes"], batch["counts"].tolist(), strict=True)]


def attribute_accuracy(logits: np.ndarray, targets: np.ndarray) -> dict[str, float]:
    """Per attribute, the percentage of objects whose best-scored label of that attribute is theirs; and
    `accuracy`, their mean."""
    scores = {name: 100.0 * float(np.mean(targets[np.arange(len(targets)), np.asarray(columns)[
        logits[:, columns].argmax(axis=1)]])) for name, columns in attribute_columns().items()}
    return {"accuracy": float(np.mean(list(scores.values()))), **scores}


class SynthBackboneTask:
    """The trainer's task: the concept CNN naming each object's labels from its box (see the module docstring)."""

    metric = "accuracy"

    def __init__(self, config: dict, world: str, train_split: tuple[list[ImageItem], list[dict]],
                 val_split: tuple[list[ImageItem], list[dict]]) -> None:
        options, self.model_config = config["task"], dict(config["model"])
        size = int(options["image_size"])
        check_image_size(self.model_config["backbone"], size, "--image-size")
        for name, (items, _) in (("train", train_split), ("val", val_split)):
            if not items:
                raise VLToolsError(f"{world}: no images of the {name} split; make a world of at least 10 images")
        self.model, _ = build_concept_cnn(self.model_config["backbone"], "none", len(LABELS))
        self.train_data = WorldObjects(*train_split, size, flip=True, seed=config["train"]["seed"])
        self.val_data = WorldObjects(*val_split, size, flip=False)
        self.val_batch_size = int(options["val_batch_size"])
        self.inputs = {"world": str(world), "train_images_digest": ids_digest([i.image_id for i in train_split[0]])}

    def collate(self, items: Sequence[dict]) -> dict[str, torch.Tensor]:
        return collate_objects(items)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return concept_loss(model(batch["images"], box_lists(batch)), batch["targets"])

    def validate(self, model: nn.Module, device: torch.device) -> dict[str, float]:
        """The accuracy of each attribute (and their mean) over the objects of the validation images."""
        logits, targets = [], []
        for start in range(0, len(self.val_data), self.val_batch_size):
            batch = collate_objects([self.val_data[i] for i in
                                     range(start, min(start + self.val_batch_size, len(self.val_data)))])
            boxes = [boxes.to(device) for boxes in box_lists(batch)]
            logits.append(model(batch["images"].to(device), boxes).float().cpu().numpy())
            targets.append(batch["targets"].numpy())
        return attribute_accuracy(np.concatenate(logits), np.concatenate(targets))

    def checkpoint_info(self) -> dict:
        return {"model": "concepts", "config": {**self.model_config, "num_concepts": len(LABELS)},
                "vocab": list(LABELS), "inputs": self.inputs, "schema": schema_version("concepts")}


def train_synth_backbone(world: str | os.PathLike, output: str | os.PathLike, *, backbone: str = "resnet18",
                         image_size: int = BACKBONE.image_size, epochs: int = BACKBONE.epochs,
                         batch_size: int = BACKBONE.batch_size, lr: float = BACKBONE.lr, seed: int = 0,
                         device: str = "auto") -> dict[str, float]:
    """Train `backbone` on the labels of the synthetic world `world` and write its trunk to `output` (a torchvision
    state dict); returns the validation accuracies of the epoch written (see the module docstring)."""
    config = build_config({
        "train": {**TRAIN_DEFAULTS, "batch_size": batch_size, "lr": lr, "lr_update": max(1, epochs - 1),
                  "val_every": 0, "save_every": 0, "log_every": 0},
        "task": {"image_size": image_size, "val_batch_size": 64},
        "model": {"backbone": backbone},
    }, options={"train.epochs": epochs, "train.seed": seed, "train.device": device})
    with labelled(f"synth-backbone {Path(output).name}"), scratch_folder() as folder:
        seed_everything(seed)
        task = SynthBackboneTask(config, str(world), world_split(world, "train"), world_split(world, "val"))
        train(task, config, folder / "labels.pt", Distributed(device=resolve_device(device)))
        payload = load_checkpoint(folder / "labels.pt")
    model = model_from_checkpoint(payload, str(output))
    save_state_dict(output, trunk_state_dict(backbone, model.trunk))
    return payload["train_state"]["metrics"]

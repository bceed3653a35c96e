"""The concept CNN task (`train --model concepts IMAGES CAPS.jsonl CONCEPTS.json`): multi-label training on whole
images with Eq. 1 (see vltools.models.concepts), validation by the mean average precision over concepts.

Targets are multi-hot over the concept vocabulary: every concept of any caption of the image. Images are
resized to `task.image_size` squares and flipped horizontally at random in training (each image's flip in
each epoch drawn from train.seed, vltools.data.draws).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from vltools.data.captions import read_split, split_images
from vltools.data.draws import FLIPS, EpochDraws
from vltools.errors import VLToolsError, argument
from vltools.io.provenance import ids_digest
from vltools.io.records import read_records
from vltools.models import schema_version
from vltools.models.concepts import ConceptCNN, build_concept_cnn, concept_loss
from vltools.text.concepts import ConceptVocabulary
from vltools.training.config import TRAIN_DEFAULTS
from vltools.vision.backbones import check_image_size, normalize
from vltools.vision.images import ImageDataset, ImageItem

TASK_DEFAULTS: dict[str, object] = {"image_size": 224, "weights": "imagenet", "val_batch_size": 64}
MODEL_DEFAULTS: dict[str, object] = ConceptCNN.DEFAULTS
CONCEPT_TRAIN_DEFAULTS = {**TRAIN_DEFAULTS, "batch_size": 32, "epochs": 20, "lr": 1e-4, "lr_update": 10,
                          "val_every": 0}


def defaults(model_name: str) -> dict[str, dict[str, object]]:
    return {"train": dict(CONCEPT_TRAIN_DEFAULTS), "task": dict(TASK_DEFAULTS), "model": dict(MODEL_DEFAULTS)}


def average_precision(scores: np.ndarray, targets: np.ndarray) -> float:
    """Mean over concepts with at least one positive of the average precision of ranking images by score."""
    aps = []
    for column in range(targets.shape[1]):
        positive = targets[:, column] > 0
        if not positive.any():
            continue
        order = np.argsort(-scores[:, column], kind="stable")
        hits = positive[order]
        precision = np.cumsum(hits) / np.arange(1, len(hits) + 1)
        aps.append(float(precision[hits].mean()))
    return 100.0 * float(np.mean(aps)) if aps else 0.0


class SquareImages(Dataset, EpochDraws):
    """Decoded images resized to `image_size` squares; `flip` mirrors them at random (training), each image in each
    epoch as `seed` draws it."""

    def __init__(self, items: Sequence[ImageItem], image_size: int, flip: bool, seed: int = 0) -> None:
        self.images = ImageDataset(items, "square", image_size)
        self.items, self.size, self.flip, self.seed = list(items), image_size, flip, seed

    def __len__(self) -> int:
        return len(self.items)

    def image(self, index: int) -> tuple[torch.Tensor, tuple[int, int], bool]:
        """Image `index` (3, S, S) uint8 as this epoch draws it, its original (h, w), and whether it was flipped."""
        sample = self.images[index]
        if "error" in sample:
            raise VLToolsError(f"{self.items[index].path}: image {self.items[index].image_id!r}: {sample['error']}; "
                               "fix or remove it")
        flipped = self.flip and self.rng(FLIPS, index).random() < 0.5
        return (sample["image"].flip(2) if flipped else sample["image"]), sample["orig_size"], flipped


class ConceptImages(SquareImages):
    """Decoded, resized (and in training randomly flipped) images with their multi-hot targets."""

    def __init__(self, items: Sequence[ImageItem], targets: np.ndarray, image_size: int, flip: bool,
                 seed: int = 0) -> None:
        super().__init__(items, image_size, flip, seed)
        self.targets = targets

    def __getitem__(self, index: int) -> dict:
        return {"image": self.image(index)[0], "target": self.targets[index]}


def collate_concepts(items: Sequence[dict]) -> dict[str, torch.Tensor]:
    return {"images": normalize(torch.stack([item["image"] for item in items])),
            "targets": torch.from_numpy(np.stack([item["target"] for item in items]))}


class ConceptTask:
    """Multi-label training of the concept CNN; the checkpoint's vocabulary is the concept list."""

    metric = "mAP"

    def __init__(self, config: dict, images: str, captions: str, vocabulary: ConceptVocabulary, train, val,
                 items: dict[str, ImageItem]) -> None:
        self.options, self.vocabulary = config["task"], vocabulary
        model = dict(config["model"])
        if model["num_concepts"] not in (len(vocabulary), MODEL_DEFAULTS["num_concepts"]):
            raise VLToolsError(f"the concepts file has K={len(vocabulary)} but the config says model.num_concepts="
                               f"{model['num_concepts']}; drop that setting or give the matching concepts file")
        model["num_concepts"] = len(vocabulary)
        self.model_config = model
        self.model, self.weights = build_concept_cnn(model["backbone"], str(self.options["weights"]), len(vocabulary))
        size = int(self.options["image_size"])
        check_image_size(model["backbone"], size, "task.image_size")
        self.train_data = ConceptImages([items[i] for i in train.image_ids], vocabulary.targets(
            train.image_ids, train.captions, [train.image_ids[i] for i in train.caption_image_index]), size, True,
            seed=config["train"]["seed"])
        self.val_data = ConceptImages([items[i] for i in val.image_ids], vocabulary.targets(
            val.image_ids, val.captions, [val.image_ids[i] for i in val.caption_image_index]), size, False)
        self.inputs = {"images": images, "captions": captions, "weights": self.weights, "tagger": vocabulary.tagger,
                       "train_images_digest": ids_digest(train.image_ids)}

    def collate(self, items: Sequence[dict]) -> dict[str, torch.Tensor]:
        return collate_concepts(items)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return concept_loss(model(batch["images"]), batch["targets"])

    def validate(self, model: nn.Module, device: torch.device) -> dict[str, float]:
        """mAP (percent) of whole-image concept scores on the validation images."""
        size = int(self.options["val_batch_size"])
        scores = []
        for start in range(0, len(self.val_data), size):
            batch = collate_concepts([self.val_data[i] for i in range(start, min(start + size, len(self.val_data)))])
            scores.append(torch.sigmoid(model(batch["images"].to(device))).float().cpu().numpy())
        return {"mAP": average_precision(np.concatenate(scores), self.val_data.targets)}

    def checkpoint_info(self) -> dict:
        return {"model": "concepts", "config": self.model_config, "vocab": self.vocabulary.concepts,
                "inputs": self.inputs, "schema": schema_version("concepts")}


def build_task(model_name: str, inputs: Sequence[str], config: dict, vocab: str | None = None,
               train_split: str = "train", val_split: str = "val") -> ConceptTask:
    """The concept CNN task from `IMAGES CAPS.jsonl CONCEPTS.json` (IMAGES: folder, list file or images JSONL)."""
    if len(inputs) != 3:
        raise VLToolsError(f"{argument('model', 'concepts')} takes three inputs, IMAGES CAPS.jsonl CONCEPTS.json; "
                           f"got {len(inputs)}")
    images, captions, concepts = inputs
    vocabulary = ConceptVocabulary.load(concepts)
    records = read_records(captions, "captions")
    train, val = (read_split(captions, split, records, chosen_by) for split, chosen_by in
                  ((train_split, "train_split"), (val_split, "val_split")))
    return ConceptTask(config, images, captions, vocabulary, train, val, split_images(images, captions, (train, val)))

"""The image-text matching task (vse, sgr, saf): VSE++ hardest-negative loss, validation by rsum.

Inputs are a features HDF5 (region features) and a captions JSONL holding the training and the
validation split. Validation computes the full validation similarity matrix in blocks and scores
R@1/5/10 in both directions; their sum (rsum) picks the best checkpoint, as in the official code.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from torch import nn

from vltools.data.blocks import CaptionBlocks, FeatureBlocks
from vltools.data.captions import (
    CaptionSplit,
    MatchingDataset,
    check_images,
    collate_matching,
    load_vocabulary,
    read_split,
)
from vltools.errors import VLToolsError, argument
from vltools.eval.retrieval import retrieval_metrics
from vltools.infer.similarity import similarity_blocks
from vltools.io.features import FeaturesReader, features_extractor
from vltools.io.progress import log
from vltools.io.provenance import ids_digest
from vltools.io.records import read_records
from vltools.losses import hardest_negative_loss
from vltools.models import build_model, default_config, schema_version
from vltools.text.tokenize import tokenizer_name
from vltools.text.vocab import Vocabulary
from vltools.training.config import check_choice

TASK_DEFAULTS: dict[str, object] = {
    "margin": 0.2,
    "max_violation": True,     # hardest negative only (VSE++); false sums over all negatives
    "negatives": "other_images",  # other_images: never a caption of the same image; diagonal: as released
    "vocab_threshold": 4,      # words seen fewer times in the vocabulary's captions map to <unk>
    "vocab_splits": "train",   # captions a built vocabulary counts: train, or train+val (released vocabularies)
    "val_captions": 0,         # validate on the first N captions of the validation split (0: all; released 5000)
    "val_batch_size": 100,     # images and captions per validation block (memory ~ block^2 x words x embed)
}
NEGATIVES = ("other_images", "diagonal")
VOCAB_SPLITS = ("train", "train+val")


def defaults(model_name: str) -> dict[str, dict[str, object]]:
    """The `task` and `model` config sections of a matching model."""
    return {"task": dict(TASK_DEFAULTS), "model": default_config(model_name)}


def data_config(model_name: str, model_config: dict, features: str | os.PathLike) -> dict:
    """The model config with the sizes the features fix (img_dim = D, num_regions = K) filled in.

    A value the user changed from its default must agree with the data; otherwise it is an error.
    """
    with FeaturesReader(features) as reader:
        _, regions, dim = reader.shape("regions")
    defaults = default_config(model_name)
    config = dict(model_config)
    for key, value in (("img_dim", dim), ("num_regions", regions)):
        if key not in defaults:
            continue
        if config[key] not in (value, defaults[key]):
            raise VLToolsError(f"{features}: the features give {key}={value} but the config says model.{key}="
                               f"{config[key]}; drop that setting or give matching features")
        config[key] = value
    return config


class MatchingTask:
    """Training data, loss and rsum validation of one matching model."""

    metric = "rsum"

    def __init__(self, model_name: str, config: dict, features: str | os.PathLike, captions: str | os.PathLike,
                 train: CaptionSplit, val: CaptionSplit, vocab: Vocabulary) -> None:
        self.model_name, self.options, self.vocab = model_name, config["task"], vocab
        check_choice("task.negatives", self.options["negatives"], NEGATIVES)
        if self.options["val_captions"]:
            val = val.head(self.options["val_captions"])
        self.features, self.val = features, val
        self.inputs = {"features": str(features), "captions": str(captions), "train_split": train.name,
                       "val_split": val.name, "train_captions": len(train), "val_captions": len(val),
                       "train_captions_digest": ids_digest(train.caption_ids),
                       "val_captions_digest": ids_digest(val.caption_ids), "tokenizer": tokenizer_name()}
        with FeaturesReader(features) as reader:
            self.inputs["feature_extractor"] = features_extractor(reader.attrs)  # match warns on other features
        self.model_config = data_config(model_name, config["model"], features)
        self.model: nn.Module = build_model(model_name, self.model_config, len(vocab))
        self.train_data = MatchingDataset(features, train, vocab)
        self.val_tokens = vocab.encode_all(self.val.captions)

    def collate(self, items: Sequence[dict]) -> dict[str, torch.Tensor]:
        return collate_matching(items)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Hardest-negative hinge on the batch's similarities.

        negatives=other_images: a caption of the same image (an image twice in the batch) is never a
        negative; negatives=diagonal: only pair i's own caption is masked, as the released loss does, so
        another caption of the same image can be a (often the hardest) negative.
        """
        sims = model(batch["regions"], batch["num_regions"], batch["tokens"], batch["lengths"])
        same = None
        if self.options["negatives"] == "other_images":
            same = batch["image_index"][:, None] == batch["image_index"][None, :]
        return hardest_negative_loss(sims, margin=self.options["margin"], max_violation=self.options["max_violation"],
                                     positive_mask=same)

    def validate(self, model: nn.Module, device: torch.device) -> dict[str, float]:
        """rsum, R@1/5/10, medr and meanr in both directions on the validation split."""
        size = self.options["val_batch_size"]
        with FeaturesReader(self.features) as reader:
            sims = similarity_blocks(model, FeatureBlocks(reader, self.val.image_ids, size),
                                     CaptionBlocks(self.val_tokens, size), device=device, desc="validation")
        metrics = retrieval_metrics(sims.numpy(), self.val.caption_image_index)
        flat = {"rsum": metrics["rsum"]}
        for direction in ("i2t", "t2i"):
            flat.update({f"{direction}_{k}": v for k, v in metrics[direction].items() if v is not None})
        return flat

    def checkpoint_info(self) -> dict:
        return {"model": self.model_name, "config": self.model_config, "vocab": self.vocab.words,
                "inputs": self.inputs, "schema": schema_version(self.model_name)}


def build_task(model_name: str, inputs: Sequence[str], config: dict, vocab: str | None = None,
               train_split: str = "train", val_split: str = "val") -> MatchingTask:
    """The matching task from `FEATS.h5 CAPS.jsonl`; the vocabulary is `vocab`, or built from the training
    captions (task.vocab_splits=train+val: training and validation captions, as the released vocabularies)."""
    if len(inputs) != 2:
        raise VLToolsError(f"{argument('model', model_name)} takes two inputs, FEATS.h5 CAPS.jsonl; got {len(inputs)}")
    features, captions = inputs
    records = read_records(captions, "captions")
    train, val = (read_split(captions, split, records, chosen_by) for split, chosen_by in
                  ((train_split, "train_split"), (val_split, "val_split")))
    for split in (train, val):
        check_images(split, features, captions)
    check_choice("task.vocab_splits", config["task"]["vocab_splits"], VOCAB_SPLITS)
    counted = train.captions + (val.captions if config["task"]["vocab_splits"] == "train+val" else [])
    words = load_vocabulary(vocab, counted, threshold=config["task"]["vocab_threshold"])
    log.info("tokenizer: %s", tokenizer_name())
    return MatchingTask(model_name, config, features, captions, train, val, words)

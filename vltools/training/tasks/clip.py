"""The CLIP task (`train --model clip IMAGES CAPS.jsonl`): an OpenCLIP model (vltools.models.clip) fine-tuned on
image-caption pairs with open_clip's own contrastive loss, validated by rsum as the matching models are.

Inputs: the images (a folder, image files, a tar, a list, an images JSONL: vltools.vision.images) and a captions
JSONL with the training and validation splits. An item is one training image; each epoch pairs it with one of its
captions, drawn from (train.seed, epoch, image) (vltools.data.draws), so that no image is twice in a batch (CLIP's
loss takes every other pair of the batch as a negative) and a resumed run draws what the uninterrupted one drew.
Images go through open_clip's preprocess of the model (its inference transform: deterministic), captions through
open_clip's tokenizer. The loss is `open_clip.ClipLoss` (symmetric InfoNCE over the share's pairs, with the model's
learned temperature exp(logit_scale) capped at 100 as open_clip's training loop clamps it); under torchrun or
train.accumulate each share's loss sees its own pairs as negatives, as every vltools task does.

The model starts from random weights (seeded by train.seed; the synthetic world's small CLIP) or from `task.init`:
an OpenCLIP model (`openclip:ARCH:TAG`, released weights; `openclip:ARCH:FILE`) or a `clip` checkpoint. The
checkpoint it writes is a model `clip` that `encode`, `match` and `search` take as `--model PATH.pt`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from vltools.data.captions import CaptionSplit, read_split, split_images
from vltools.data.draws import NEGATIVES, EpochDraws
from vltools.errors import VLToolsError, argument
from vltools.eval.retrieval import retrieval_metrics
from vltools.infer.loader import OpenClipModel, load_model
from vltools.infer.openclip import image_embeddings, text_embeddings
from vltools.io.progress import log
from vltools.io.provenance import ids_digest
from vltools.io.records import read_records
from vltools.models import build_model, default_config, schema_version
from vltools.models.clip import Clip
from vltools.training.config import TRAIN_DEFAULTS
from vltools.vision.images import BadImage, ImageItem, read_item
from vltools.vision.openclip import OpenClip, open_clip_package, preprocess_of, tokenizer_of

TASK_DEFAULTS: dict[str, object] = {
    "init": "",                # the weights it starts from: openclip:ARCH:TAG (or :FILE), a clip checkpoint; "": random
    "max_scale": 100.0,        # the cap of exp(logit_scale) in the loss (open_clip's training clamps it there)
    "val_batch_size": 64,      # images (and 4 x as many captions) per validation batch
}
# fine-tuning: a small learning rate, no decay within the default epochs (the synthetic world's recipe sets its own)
CLIP_TRAIN_DEFAULTS = {**TRAIN_DEFAULTS, "batch_size": 128, "epochs": 10, "lr": 1e-5, "lr_update": 100,
                       "grad_clip": 0.0, "val_every": 0}
CAPTION_DRAWS = NEGATIVES + 10   # the stream of the caption each image is paired with in an epoch


def defaults(model_name: str) -> dict[str, dict[str, object]]:
    return {"train": dict(CLIP_TRAIN_DEFAULTS), "task": dict(TASK_DEFAULTS), "model": default_config("clip")}


class ImageCaptionPairs(Dataset, EpochDraws):
    """Each image of a split, preprocessed, with one of its captions drawn for the epoch: {"pixels", "caption"}."""

    def __init__(self, items: Sequence[ImageItem], split: CaptionSplit, preprocess, seed: int = 0) -> None:
        self.items, self.preprocess, self.seed = list(items), preprocess, seed
        self.captions: list[list[str]] = [[] for _ in items]
        for caption, image in zip(split.captions, split.caption_image_index.tolist(), strict=True):
            self.captions[image].append(caption)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict:
        item = self.items[index]
        try:
            image, _ = read_item(item)
        except BadImage as exc:
            raise VLToolsError(f"{item.path}: image {item.image_id!r} cannot be used ({exc}); fix or remove it "
                               "and its captions") from None
        choices = self.captions[index]
        return {"pixels": self.preprocess(image),
                "caption": choices[int(self.rng(CAPTION_DRAWS, index).integers(len(choices)))]}


class ClipTask:
    """Contrastive fine-tuning of an OpenCLIP model; validation by rsum (R@1/5/10 both ways) on the val split."""

    metric = "rsum"

    def __init__(self, config: dict, images: str, captions: str, train: CaptionSplit, val: CaptionSplit,
                 items: dict[str, ImageItem]) -> None:
        self.options = config["task"]
        self.model_config, start = _model_config(config["model"], str(self.options["init"]))
        self.model: Clip = build_model("clip", self.model_config, 0)
        if start is not None:
            self.model.clip.load_state_dict(start.model.state_dict())
        arch = str(self.model_config["arch"])
        self.preprocess, self.tokenizer = preprocess_of(self.model.clip), tokenizer_of(self.model.clip, arch)
        self.loss_fn = open_clip_package().ClipLoss()
        self.train_data = ImageCaptionPairs([items[i] for i in train.image_ids], train, self.preprocess,
                                            seed=config["train"]["seed"])
        self.val, self.val_items = val, [items[i] for i in val.image_ids]
        self.inputs = {"images": images, "captions": captions, "train_split": train.name, "val_split": val.name,
                       "train_images": len(train.image_ids), "val_captions": len(val),
                       "train_captions_digest": ids_digest(train.caption_ids),
                       "val_captions_digest": ids_digest(val.caption_ids),
                       "init": str(self.options["init"]), "init_weights": start.weights if start else "random"}

    def collate(self, items: Sequence[dict]) -> dict[str, torch.Tensor]:
        return {"pixels": torch.stack([item["pixels"] for item in items]),
                "tokens": self.tokenizer([item["caption"] for item in items])}

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """open_clip's ClipLoss of the batch's pairs, in fp32 (the features may come out of an autocast)."""
        image, text, scale = model(batch["pixels"], batch["tokens"])
        return self.loss_fn(image.float(), text.float(), scale.float().clamp(max=float(self.options["max_scale"])))

    def validate(self, model: nn.Module, device: torch.device) -> dict[str, float]:
        """rsum, R@1/5/10, medr and meanr in both directions on the validation split (every caption)."""
        clip = OpenClip(model.clip, self.preprocess, self.tokenizer, str(self.model_config["arch"]), "training", "",
                        {})
        size = int(self.options["val_batch_size"])
        image_emb = np.concatenate([emb for _, emb in image_embeddings(clip, self.val_items, device,
                                                                       batch_size=size)])
        caption_emb = np.concatenate(list(text_embeddings(clip, self.val.captions, device, batch_size=4 * size)))
        metrics = retrieval_metrics(image_emb @ caption_emb.T, self.val.caption_image_index)
        flat = {"rsum": metrics["rsum"], "logit_scale": float(model.clip.logit_scale.exp())}
        for direction in ("i2t", "t2i"):
            flat.update({f"{direction}_{k}": v for k, v in metrics[direction].items() if v is not None})
        return flat

    def checkpoint_info(self) -> dict:
        return {"model": "clip", "config": self.model_config, "vocab": None, "inputs": self.inputs,
                "schema": schema_version("clip")}


def _model_config(config: dict, init: str) -> tuple[dict, OpenClip | None]:
    """The model section and the OpenCLIP model it starts from (`task.init`; None: random weights): an init's
    architecture, config overrides and preprocessing settings are the model's (a model.arch other than the default
    must agree)."""
    if not init:
        return dict(config), None
    loaded = load_model(init, "encodable", "init")
    if not isinstance(loaded, OpenClipModel):
        raise VLToolsError(f"{init}: a {loaded.name} checkpoint cannot initialise {argument('model', 'clip')}; give "
                           "openclip:ARCH:TAG (released weights), openclip:ARCH:FILE or a clip checkpoint")
    start = loaded.clip
    given = str(config["arch"])
    if given not in (start.arch, Clip.DEFAULTS["arch"]):
        raise VLToolsError(f"{init}: an {start.arch} model, but the config says model.arch={given}; drop that "
                           "setting or give weights of that architecture")
    log.info("clip starts from %s (%s)", init, start.weights)
    if loaded.name == "clip":      # a clip checkpoint: its own model section
        return {**config, **{key: loaded.config[key] for key in ("arch", "overrides", "preprocess")
                             if key in loaded.config}}, start
    preprocess = json.loads(json.dumps(start.preprocess_cfg))   # plain lists and numbers, as a config holds them
    return {**config, "arch": start.arch, "overrides": {}, "preprocess": preprocess}, start


def build_task(model_name: str, inputs: Sequence[str], config: dict, vocab: str | None = None,
               train_split: str = "train", val_split: str = "val") -> ClipTask:
    """The CLIP task from `IMAGES CAPS.jsonl` (IMAGES: a folder, image files, a tar, a list or an images JSONL)."""
    if len(inputs) != 2:
        raise VLToolsError(f"{argument('model', 'clip')} takes two inputs, IMAGES CAPS.jsonl; got {len(inputs)}")
    if vocab is not None:
        raise VLToolsError(f"{argument('vocab')}: a CLIP model reads captions with open_clip's tokenizer; drop it")
    images, captions = (str(path) for path in inputs)
    records = read_records(captions, "captions")
    train, val = (read_split(captions, split, records, chosen_by) for split, chosen_by in
                  ((train_split, "train_split"), (val_split, "val_split")))
    return ClipTask(config, images, captions, train, val, split_images(images, captions, (train, val)))

"""Semantic image retrieval (Gordo & Larlus): `train --model rmac IMAGES.jsonl PROXY.h5`, trained from images.

An epoch is one mining round: before it, `start_epoch` mines triplets with the current model (`data.triplets`,
seeded by (seed, epoch)) and draws the epoch's `mine_every` x `batch_size` triplets from them at random; so the
paper's "re-mine every t = 64 updates" is `task.mine_every = 64` and its lr drop after 8k iterations is
`train.lr_update = 125` epochs. A batch loads each of its distinct images once (the three streams share weights).
Before training, the PCA-whitening layer is fitted to the region vectors of `whiten_images` training images.
Validation: NDCG AUC of the first `val_queries` validation images against the first `val_images` (the proxy's
relevance, query removed), as `score semantic` computes it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from vltools.data.triplets import MiningOptions, mine_round
from vltools.devices import resolve_device
from vltools.errors import VLToolsError, argument, shown_ids
from vltools.eval.semantic import DEFAULT_R, curves_from_scores, summarize_curves
from vltools.io.progress import log
from vltools.io.provenance import ids_digest
from vltools.io.proxy import ProxyFile, read_proxy_file
from vltools.losses import SEMANTIC_LOSSES, semantic_loss
from vltools.models import build_model, default_config, schema_version
from vltools.models.rmac import pca_whitening
from vltools.training.config import TRAIN_DEFAULTS
from vltools.vision.backbones import build_backbone, check_image_size
from vltools.vision.embedding import ImageStore, embed_images, pad_batch
from vltools.vision.images import list_inputs

TASK_DEFAULTS: dict[str, object] = {
    "loss": "v",              # v (Eq. 1), vt (Eqs. 1-3), wsabie (Eq. 2)
    "margin": 0.1,
    "weights": "imagenet",    # backbone initialisation: imagenet, imagenet-v2, none or a state dict file
    "image_size": 576,        # longest side of the images
    "mine_every": 64,         # updates per mining round (= one epoch)
    "queries": 500, "relevant": 9, "pool": 5000, "per_pair": 100,
    "whiten_images": 2000,    # training images whose region vectors fit the PCA-whitening
    "whiten_eps": 1e-6,       # added to the eigenvalues, times the largest (regularises the whitening)
    "val_queries": 1000, "val_images": 10000,
    "embed_batch": 32,        # images per forward pass when embedding (mining, whitening, validation)
    "cache_images": False,    # keep decoded images in memory (small datasets)
    "calibrate_bn": False,    # random-init backbones: BatchNorm statistics from the whitening images first
}
# the paper: batch 64 triplets, Adam 1e-5 dropping to 1e-6 after 8k iterations (125 rounds of 64); 16k in all
SEMANTIC_TRAIN = {"batch_size": 64, "lr": 1e-5, "lr_update": 125, "epochs": 250, "grad_clip": 0.0, "val_every": 0,
                  "save_every": 0}


def defaults(model_name: str) -> dict[str, dict[str, object]]:
    """The `train` (the paper's schedule), `task` and `model` sections of the R-MAC model."""
    return {"train": {**TRAIN_DEFAULTS, **SEMANTIC_TRAIN}, "task": dict(TASK_DEFAULTS),
            "model": default_config(model_name)}


class TripletSlots(torch.utils.data.Dataset):
    """The current round's triplets (proxy rows), a fixed number of them so that every round has the same steps."""

    def __init__(self, size: int) -> None:
        self.triplets = np.zeros((size, 3), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.triplets)

    def __getitem__(self, index: int) -> np.ndarray:
        return self.triplets[index]


class SemanticTask:
    """Triplet training of the R-MAC embedding with the V, V+T or WSABIE loss; validation by NDCG AUC."""

    metric = "ndcg_auc"

    def __init__(self, config: dict, images_path: str | os.PathLike, proxy_path: str | os.PathLike,
                 proxy: ProxyFile, store: ImageStore, train_rows: np.ndarray, val_rows: np.ndarray) -> None:
        self.options, self.seed = config["task"], config["train"]["seed"]
        if self.options["loss"] not in SEMANTIC_LOSSES:
            raise VLToolsError(f"task.loss {self.options['loss']!r}: use one of {', '.join(SEMANTIC_LOSSES)}")
        self.proxy, self.store, self.train_rows, self.val_rows = proxy, store, train_rows, val_rows
        self.model_config = {**config["model"], "text": self.options["loss"] != "v"}
        self.model: nn.Module = build_model("rmac", self.model_config, len(proxy.vocab))
        check_image_size(self.model_config["backbone"], int(self.options["image_size"]), "task.image_size")
        if self.options["weights"] != "none":
            backbone, _ = build_backbone(self.model_config["backbone"], self.options["weights"])
            self.model.backbone.load_state_dict(backbone.state_dict())
        self.mining = MiningOptions(queries=self.options["queries"], relevant=self.options["relevant"],
                                    pool=self.options["pool"], per_pair=self.options["per_pair"],
                                    margin=self.options["margin"])
        self.train_data = TripletSlots(self.options["mine_every"] * config["train"]["batch_size"])
        self.inputs = {"images": str(images_path), "proxy": str(proxy_path), "train_images": len(train_rows),
                       "val_images": len(val_rows), "ids_digest": ids_digest(proxy.ids)}

    def _embed(self, model: nn.Module, rows: Sequence[int], device: torch.device, desc: str) -> np.ndarray:
        was_training = model.training
        model.eval()
        try:
            return embed_images(lambda images, sizes: model.encode_images(images, sizes.to(device)), self.store,
                                rows, device, self.options["embed_batch"], desc=desc)
        finally:
            model.train(was_training)

    def calibrate_batchnorm(self, rows: Sequence[int], device: torch.device) -> None:
        """BatchNorm running statistics = the average of the per-batch statistics over `rows`' images (a random-init
        backbone's are 0 and 1, which normalise nothing); then frozen like a pretrained backbone's."""
        layers = [m for m in self.model.backbone.modules() if isinstance(m, nn.BatchNorm2d)]
        for layer in layers:
            layer.reset_running_stats()
            layer.momentum = None
            layer.train()

        def forward(images: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
            return self.model.encode_images(images, sizes.to(device))

        embed_images(forward, self.store, [int(r) for r in rows], device, self.options["embed_batch"],
                     desc="batchnorm statistics")
        for layer in layers:
            layer.momentum = 0.1
        self.model.eval()

    def init_whitening(self, device: torch.device) -> None:
        """Fit the whitening layer to the region vectors (every scale) of the first `whiten_images` training images."""
        model = self.model.to(device).eval()
        rows = self.train_rows[:self.options["whiten_images"]]
        if self.options["calibrate_bn"]:
            self.calibrate_batchnorm(rows, device)

        def regions(images: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
            h, w = sizes[0].tolist()
            return model.scale_regions(images[:, :, :h, :w])[0]

        vectors = embed_images(regions, self.store, [int(r) for r in rows], device, 1, desc="whitening")
        weight, bias = pca_whitening(torch.from_numpy(vectors), self.options["whiten_eps"])
        with torch.no_grad():
            model.whiten.weight.copy_(weight)
            model.whiten.bias.copy_(bias)
        log.info("PCA-whitening fitted to %d region vectors of %d training images", len(vectors), len(rows))

    def start_epoch(self, model: nn.Module, epoch: int, device: torch.device) -> None:
        """Mine this round's triplets with the current model and draw the round's batches from them."""
        seed = self.seed * 100_003 + epoch
        triplets = mine_round(self.proxy.neighbors, self.train_rows, self.mining, seed,
                              lambda pool: self._embed(model, pool.tolist(), device, "mining"))
        if len(triplets) == 0:
            raise VLToolsError("no training triplet could be mined: the training split needs images with proxy "
                               "neighbours and others outside them")
        draw = np.random.default_rng([self.seed, epoch]).integers(len(triplets), size=len(self.train_data))
        self.train_data.triplets = triplets[draw]

    def collate(self, items: Sequence[np.ndarray]) -> dict[str, torch.Tensor]:
        """The distinct images of the triplets (padded), their sizes, the triplets as positions among them, and
        their tf-idf rows when the loss uses text."""
        triplets = np.stack(items)
        rows, positions = np.unique(triplets, return_inverse=True)
        images, sizes = pad_batch([self.store.image(int(r)) for r in rows])
        batch = {"images": images, "sizes": sizes, "triplets": torch.from_numpy(positions.reshape(-1, 3))}
        if self.model_config["text"]:
            batch["tfidf"] = torch.from_numpy(self.proxy.tfidf[rows].toarray())
        return batch

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        phi, theta = model(batch["images"], batch["sizes"], batch.get("tfidf"))
        q, p, n = batch["triplets"].unbind(1)
        text = None if theta is None else (theta[q], theta[p], theta[n])
        return semantic_loss(self.options["loss"], (phi[q], phi[p], phi[n]), text, self.options["margin"])

    def validate(self, model: nn.Module, device: torch.device) -> dict[str, float]:
        """NDCG and PCC AUC (percent) of image queries on the validation split."""
        database = self.val_rows[:self.options["val_images"]]
        queries = database[:self.options["val_queries"]]
        emb = self._embed(model, database.tolist(), device, "validation")
        relevance = (self.proxy.tfidf[queries] @ self.proxy.tfidf[database].T).toarray()
        r_values = [r for r in DEFAULT_R if r < len(database)]
        ndcg, pcc = curves_from_scores(emb[:len(queries)] @ emb.T, relevance, np.arange(len(queries)), r_values)
        summary = summarize_curves(ndcg, pcc, r_values)
        return {"ndcg_auc": summary["ndcg_auc"] or 0.0, "pcc_auc": summary["pcc_auc"] or 0.0}

    def checkpoint_info(self) -> dict:
        return {"model": "rmac", "config": self.model_config, "vocab": self.proxy.vocab, "inputs": self.inputs,
                "schema": schema_version("rmac")}


def build_task(model_name: str, inputs: Sequence[str], config: dict, vocab: str | None = None,
               train_split: str = "train", val_split: str = "val") -> SemanticTask:
    """The task from `IMAGES.jsonl PROXY.h5`: every proxy image must be in the images file."""
    if len(inputs) != 2:
        raise VLToolsError(f"{argument('model', model_name)} takes two inputs, IMAGES.jsonl PROXY.h5; "
                           f"got {len(inputs)}")
    if vocab is not None:
        raise VLToolsError("--vocab does not apply to --model rmac: its words are the proxy's vocabulary")
    images_path, proxy_path = inputs
    proxy = read_proxy_file(proxy_path)
    items = {item.image_id: item for item in list_inputs([images_path])}
    missing = [i for i in proxy.ids if i not in items]
    if missing:
        raise VLToolsError(f"{proxy_path}: {len(missing)} proxy images are not in {images_path}: {shown_ids(missing)}"
                           "; build the proxy and the images file over the same images")
    rows = {split: proxy.split_rows(split) for split in (train_split, val_split)}
    for split, found in rows.items():
        if len(found) < 2:
            raise VLToolsError(f"{proxy_path}: split {split!r} has {len(found)} images; give "
                               f"{argument('train_split')} / {argument('val_split')} naming splits of the proxy")
    store = ImageStore([items[i] for i in proxy.ids], config["task"]["image_size"], config["task"]["cache_images"])
    task = SemanticTask(config, images_path, proxy_path, proxy, store, rows[train_split], rows[val_split])
    task.init_whitening(resolve_device(config["train"]["device"]))
    return task

"""The L2C task: difference descriptions of image pairs, with single-image captioning as auxiliary task.

Inputs: `PAIRS.jsonl FEATS.h5 [CAPTIONS.jsonl [AUX_FEATS.h5]]`: pairs with descriptions (Birds-to-Words
converted by `vltools convert birds-to-words`, or synth's pairs.jsonl), the segment-pool features of
their images, and optionally single-image captions (CUB by `vltools convert cub`, or synth's
aux_captions.jsonl) whose feature maps are in AUX_FEATS.h5 (default: FEATS.h5). Without captions the
model trains on pairs only (L2C[B2W]); with them each step also takes `task.aux_batch_size` captions
(every `task.aux_every` steps) and the loss is L_diff + L_single + lambda L_TV (Eq. 6).

The loss is `vltools.losses.l2c_loss`: L_diff and L_single (Eqs. 4-5) are the cross-entropies summed over each
sentence's tokens and averaged over the batch's sentences, L_TV is Eq. 2 of each image (summed over its K maps
and pixels) averaged over the step's images, lambda = `task.tv_weight` = 1 (section 3.1). Validation describes every
validation pair (beam `task.val_beam`) and scores ROUGE-L against all its descriptions; the best
checkpoint by ROUGE-L is kept, as the paper selects models (generated words against the references in PTB
tokens from NLTK, no Java: vltools.eval.caption.treebank_tokenize; `vltools score caption` gives the reported
numbers).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from vltools.data.captions import load_vocabulary
from vltools.data.l2c import (
    CaptionDataset,
    FeatureMaps,
    PairDataset,
    check_map_features,
    collate_images,
    collate_pairs,
    read_image_captions,
    read_pairs,
)
from vltools.errors import VLToolsError, argument
from vltools.eval.caption import rouge_l, treebank_tokenize
from vltools.infer.pairs import describe_pairs
from vltools.io.features import FeaturesReader
from vltools.io.provenance import ids_digest
from vltools.io.records import read_records
from vltools.losses import l2c_loss
from vltools.models import build_model, schema_version
from vltools.models.l2c import L2C
from vltools.text.captions import CaptionPreprocessing
from vltools.training.config import TRAIN_DEFAULTS

TASK_DEFAULTS: dict[str, object] = {
    "tv_weight": 1.0,          # lambda of Eq. 6 (section 3.1: 1); 0 is Table 3's "- TV Loss"
    "aux_batch_size": 128,     # single-image captions per step (the paper's CUB batch)
    "aux_every": 1,            # take an auxiliary batch every N steps (1: every step, as the paper)
    "aux_split": "train",      # split of the single-image captions to train on
    "tokenizer": "karpathy",   # caption preprocessing (vltools.text.captions)
    "min_count": 5,
    "max_words": 64,           # Birds-to-Words descriptions are paragraphs (about 32 words on average)
    "val_beam": 3,
    "val_max_len": 64,
    "val_batch_size": 64,
}
# the paper's optimiser: Adam 1e-4, no decay named; pairs batch 16
L2C_TRAIN = {"lr": 1e-4, "batch_size": 16, "lr_update": 0, "epochs": 30}


def defaults(model_name: str) -> dict[str, dict[str, object]]:
    """The `train` (the paper's optimiser over the loop's defaults), `task` and `model` sections."""
    return {"train": {**TRAIN_DEFAULTS, **L2C_TRAIN}, "task": dict(TASK_DEFAULTS), "model": dict(L2C.DEFAULTS)}


def feature_dim(path: str | os.PathLike) -> int:
    with FeaturesReader(path) as reader:
        if "featmap" not in reader.fields:
            raise VLToolsError(f"{path}: has no /featmap dataset; L2C reads feature maps and masks written by "
                               "`vltools segment-pool`")
        return reader.shape("featmap")[1]


def _shifted(tokens: torch.Tensor, steps: int) -> torch.Tensor:
    """The targets tokens[:, 1:] right-padded with `<pad>` to `steps` positions."""
    return F.pad(tokens[:, 1:], (0, steps - (tokens.shape[1] - 1)))


class L2CTask:
    """Pairs (and single-image captions), the Eq. 6 loss, and ROUGE-L validation of one L2C model."""

    metric = "ROUGE_L"

    def __init__(self, config: dict, pairs_path: str, features: str, captions_path: str | None,
                 aux_features: str | None, train_split: str, val_split: str, vocab: str | None) -> None:
        self.options = options = config["task"]
        self.prep = CaptionPreprocessing(options["tokenizer"], options["min_count"], options["max_words"])
        records = read_records(pairs_path, "pairs")
        train = read_pairs(pairs_path, train_split, records, need_descriptions=True, chosen_by="train_split")
        self.val = read_pairs(pairs_path, val_split, records, need_descriptions=True, chosen_by="val_split")
        self._val_refs: dict[str, list[str]] | None = None
        check_map_features(features, train.image_ids + self.val.image_ids, pairs_path)
        texts = [text for _, text in train.items()]
        aux = None
        if captions_path is not None:
            aux = read_image_captions(captions_path, options["aux_split"])
            aux_features = aux_features or features
            check_map_features(aux_features, aux.image_ids, captions_path)
            texts += aux.captions
        self.vocab = load_vocabulary(vocab, texts) if vocab else self.prep.build_vocab(texts)
        self.model_config = {**config["model"], "feature_dim": feature_dim(features)}
        self.model: nn.Module = build_model("l2c", self.model_config, len(self.vocab))
        encode = self._encode
        self.maps = FeatureMaps(features)
        self.train_data = PairDataset(self.maps, train, encode)
        self.aux_data = CaptionDataset(FeatureMaps(aux_features), aux, encode) if aux is not None else None
        self.aux_batch_size, self.aux_every = options["aux_batch_size"], options["aux_every"]
        self.inputs = {"pairs": str(pairs_path), "features": str(features), "train_split": train_split,
                       "val_split": val_split, "train_pairs": len(train), "train_descriptions": len(self.train_data),
                       "val_pairs": len(self.val), "train_pairs_digest": ids_digest(train.pair_ids),
                       "val_pairs_digest": ids_digest(self.val.pair_ids)}
        if aux is not None:
            self.inputs.update(captions=str(captions_path), aux_features=str(aux_features),
                               aux_captions=len(aux), aux_images_digest=ids_digest(list(dict.fromkeys(aux.image_ids))))

    def _encode(self, text: str) -> list[int]:
        return self.prep.encode_one(self.vocab, text)

    def collate(self, items: Sequence[dict]) -> dict[str, torch.Tensor]:
        return collate_pairs(items)

    def aux_collate(self, items: Sequence[dict]) -> dict[str, torch.Tensor]:
        return collate_images(items)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """L_diff + L_single + lambda L_TV (Eq. 6) over the step's pairs and single images."""
        out = model(batch["featmap_a"], batch["mask_a"], batch["featmap_b"], batch["mask_b"], batch["tokens"],
                    batch.get("aux_featmap"), batch.get("aux_mask"), batch.get("aux_tokens"))
        steps = out.pair_logp.shape[1]
        single_targets = _shifted(batch["aux_tokens"], steps) if out.single_logp is not None else None
        return l2c_loss(out.pair_logp, _shifted(batch["tokens"], steps), out.tv, out.single_logp, single_targets,
                        self.options["tv_weight"])

    def references(self) -> dict[str, list[str]]:
        """The validation pairs' descriptions in PTB tokens without Java (treebank_tokenize), at first use."""
        if self._val_refs is None:
            self._val_refs = treebank_tokenize(dict(zip(self.val.pair_ids, self.val.descriptions, strict=True)))
        return self._val_refs

    def validate(self, model: nn.Module, device: torch.device) -> dict[str, float]:
        """ROUGE-L (x100) of the validation pairs' generated descriptions against all their descriptions."""
        texts = describe_pairs(model, self.maps, self.val, self.vocab, beam_size=self.options["val_beam"],
                               max_len=self.options["val_max_len"], batch_size=self.options["val_batch_size"],
                               device=device)
        predictions = {pair: " ".join(self.prep.words(text)) for pair, text in zip(self.val.pair_ids, texts,
                                                                                   strict=True)}
        return {"ROUGE_L": 100.0 * rouge_l(predictions, self.references())}

    def checkpoint_info(self) -> dict:
        return {"model": "l2c", "config": self.model_config, "vocab": self.vocab.words, "inputs": self.inputs,
                "schema": schema_version("l2c")}


def build_task(model_name: str, inputs: Sequence[str], config: dict, vocab: str | None = None,
               train_split: str = "train", val_split: str = "val") -> L2CTask:
    """The L2C task from `PAIRS.jsonl FEATS.h5 [CAPTIONS.jsonl [AUX_FEATS.h5]]`."""
    if not 2 <= len(inputs) <= 4:
        raise VLToolsError(f"{argument('model', 'l2c')} takes PAIRS.jsonl FEATS.h5 [CAPTIONS.jsonl "
                           f"[AUX_FEATS.h5]]; got {len(inputs)} inputs")
    pairs, features, captions, aux_features = (*inputs, None, None)[:4]
    return L2CTask(config, pairs, features, captions, aux_features, train_split, val_split, vocab)

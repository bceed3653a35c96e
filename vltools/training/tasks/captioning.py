"""The captioning task (neuraltalk2, adaptive-attention): MLE, Dai & Lin's CL / CL(P) / CL(N), and IL.

Inputs are a features HDF5 (`/global` for NeuralTalk2, `/regions` for AdaptiveAttention) and a
captions JSONL with the training and validation splits. Captions are preprocessed as
vltools.text.captions says (task.tokenizer, task.min_count, task.max_words); the vocabulary is
stored in the checkpoint, the preprocessing in its train_state config.

Objectives (task.objective, `train --objective`):
- `mle`: the token cross-entropy of the ground-truth captions (vltools.losses.sequence_cross_entropy);
- `cl`: -J of eqs. 7-10 (vltools.losses.contrastive_objective): each batch's B ground-truth pairs are
  the positives, K = task.negatives sets of B captions of other images (drawn afresh each epoch, from the
  seed) the negatives,
  G = ln p_target - ln p_reference summed over words and `<end>`, nu = task.nu; the reference
  (`--reference REF.pt`) is frozen in eval mode; the target starts from `--init` (default: the reference);
- `cl-p` / `cl-n`: only the positive / negative term of eq. 9 (Table 4);
- `il`: the introspective baseline (Dai & Lin's [21, 16]): the target model is its own reference, each
  caption scored under its image and under one fixed mismatched image, -mean ln sigmoid(G - ln nu) with
  G = ln p(c | I) - ln p(c | I_mismatch).
Validation decodes the validation images greedily and scores CIDEr-D; the best checkpoint is kept. It needs no
Java (the references get the PTB tokenizer's tokens from NLTK, vltools.eval.caption.treebank_tokenize), so the
same checkpoint is picked on every machine; `vltools score caption` gives the reported numbers.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import torch
from torch import nn

from vltools.data.captioning import (
    CaptioningDataset,
    batch_images,
    collate_captioning,
    feature_fields,
    fixed_mismatches,
    image_tensors,
)
from vltools.data.captions import CaptionSplit, check_images, load_vocabulary, read_split
from vltools.errors import VLToolsError, argument
from vltools.eval.caption import cider_d, treebank_tokenize
from vltools.infer.caption import caption_batches
from vltools.infer.loader import load_model
from vltools.io.features import FeaturesReader
from vltools.io.progress import log
from vltools.io.provenance import ids_digest
from vltools.io.records import read_records
from vltools.losses import contrastive_objective, sequence_cross_entropy, sequence_logprob
from vltools.models import MODELS, build_model, checkpoint_config, default_config, schema_version
from vltools.models.captioners import Captioner
from vltools.text.captions import CaptionPreprocessing
from vltools.text.vocab import Vocabulary
from vltools.training.config import TRAIN_DEFAULTS

OBJECTIVES = ("mle", "cl", "cl-p", "cl-n", "il")

TASK_DEFAULTS: dict[str, object] = {
    "objective": "mle",     # mle, cl, cl-p, cl-n or il
    "reference": "",        # CL's frozen reference checkpoint
    "init": "",             # checkpoint the model starts from (CL default: the reference)
    "negatives": 5,         # K, negative sets per positive (CL)
    "nu": 1.0,              # T_n / T_m in r_nu (Dai & Lin fix 1)
    "tokenizer": "karpathy",
    "min_count": 5,         # words seen fewer times in the training captions become <unk>
    "max_words": 18,        # captions cut to this many words (Dai & Lin 5.1); also the validation decoding length
    "val_images": 0,        # validate on the first N validation images (0: all)
    "val_batch_size": 100,  # images decoded at once in validation
}

# ImageCaptioning.pytorch habits: 50 captions a batch, Adam 5e-4, no step decay; CL's recipe sets lr 1e-6
TRAIN_OVERRIDES: dict[str, object] = {"epochs": 30, "batch_size": 50, "lr": 5e-4, "lr_update": 0}


def defaults(model_name: str) -> dict[str, dict[str, object]]:
    """The `train`, `task` and `model` config sections of a captioner."""
    return {"train": {**TRAIN_DEFAULTS, **TRAIN_OVERRIDES}, "task": dict(TASK_DEFAULTS),
            "model": default_config(model_name)}


FIT_IMAGES = 5000  # at most this many training images (evenly spaced) measure the feature standardisation
FIT_BATCH = 100


def fit_feature_norm(model: Captioner, features: str | os.PathLike, image_ids: Sequence[str]) -> None:
    """Measure the captioner's feature standardisation (vltools.models.captioners) on the training images' features,
    at most FIT_IMAGES of them, evenly spaced; a model with feature_norm none is left as it is."""
    picked = list(image_ids)[::-(-len(image_ids) // FIT_IMAGES)]
    with FeaturesReader(features) as reader:
        fields = feature_fields(reader.fields, model.features)
        model.fit_features(image_tensors(arrays) for _, arrays in reader.iter_batches(FIT_BATCH, picked, fields))


def data_config(model_name: str, model_config: dict, features: str | os.PathLike, field: str) -> dict:
    """The model config with img_dim set from the features' last dimension (a changed, different value is an error)."""
    with FeaturesReader(features) as reader:
        dim = reader.shape(field)[-1]
    config = dict(model_config)
    if config["img_dim"] not in (dim, default_config(model_name)["img_dim"]):
        raise VLToolsError(f"{features}: /{field} has {dim} features but the config says model.img_dim="
                           f"{config['img_dim']}; drop that setting or give matching features")
    config["img_dim"] = dim
    return config


class CaptioningTask:
    """Training data, objective and CIDEr-D validation of one captioner."""

    metric = "CIDEr"

    def __init__(self, model_name: str, config: dict, features: str | os.PathLike, captions: str | os.PathLike,
                 train: CaptionSplit, val: CaptionSplit, vocab: Vocabulary, init: dict | None = None,
                 reference: Captioner | None = None) -> None:
        self.model_name, self.options, self.vocab = model_name, config["task"], vocab
        self.objective = self.options["objective"]
        self.features, self.val, self.reference = features, val, reference
        self.prep = CaptionPreprocessing.from_config(self.options)
        model_config = checkpoint_config(init, self.options["init"]) if init is not None else config["model"]
        changed = {k: v for k, v in config["model"].items() if v != default_config(model_name)[k]}
        clash = [k for k, v in changed.items() if init is not None and model_config.get(k, v) != v]
        if clash:
            raise VLToolsError(f"{self.options['init']}: has model.{clash[0]}={model_config[clash[0]]!r} but the "
                               f"config says {changed[clash[0]]!r}; the model keeps its --init sizes, drop the setting")
        self.model_config = data_config(model_name, model_config, features, MODELS[model_name].features[0])
        self.model: Captioner = build_model(model_name, self.model_config, len(vocab))
        if init is not None:
            self.model.load_state_dict(init["state_dict"])
        else:
            fit_feature_norm(self.model, features, train.image_ids)
        needs = list(self.model.features) + (list(reference.features) if reference is not None else [])
        with FeaturesReader(features) as reader:
            self.fields = feature_fields(reader.fields, needs)
        tokens = [self.prep.encode_one(vocab, c) for c in train.captions]
        negatives = self.options["negatives"] if self.objective in ("cl", "cl-p", "cl-n") else 0
        mismatch = (fixed_mismatches(len(train.image_ids), config["train"]["seed"]) if self.objective == "il"
                    else None)
        self.train_data = CaptioningDataset(features, train, tokens, self.fields, negatives, mismatch,
                                            seed=config["train"]["seed"])
        self.val_images = val.image_ids[:self.options["val_images"] or None]
        self._val_refs: dict[str, list[str]] | None = None
        self.inputs = {"features": str(features), "captions": str(captions), "train_split": train.name,
                       "val_split": val.name, "train_captions": len(train), "val_images": len(self.val_images),
                       "train_captions_digest": ids_digest(train.caption_ids), "objective": self.objective,
                       "reference": self.options["reference"], "init": self.options["init"]}

    def collate(self, items: Sequence[dict]) -> dict[str, torch.Tensor]:
        return collate_captioning(items)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        images, tokens, rows = batch_images(batch), batch["tokens"], batch["image_rows"]
        targets = tokens[:, 1:]
        logp = model(images, tokens, rows)
        if self.objective == "mle":
            loss = sequence_cross_entropy(logp, targets)
        else:
            loss = -self._contrast(sequence_logprob(logp, targets), images, tokens, rows)
        if not torch.isfinite(loss):
            raise VLToolsError(f"the {self.objective} loss is not finite ({float(loss)}); lower train.lr, or check "
                               "the features for inf/NaN")
        return loss

    def _contrast(self, target: torch.Tensor, images: dict[str, torch.Tensor], tokens: torch.Tensor,
                  rows: torch.Tensor) -> torch.Tensor:
        """J of CL (eqs. 7-10) or of IL for the batch's sequence log-probabilities `target`."""
        shift = math.log(self.options["nu"])
        if self.objective == "il":
            b = target.size(0) // 2
            return torch.nn.functional.logsigmoid(target[:b] - target[b:] - shift).mean()
        assert self.reference is not None
        self.reference.to(tokens.device)
        with torch.no_grad():
            reference = sequence_logprob(self.reference(images, tokens, rows), tokens[:, 1:])
        b = int(rows.max()) + 1
        k = target.size(0) // b - 1
        return contrastive_objective(target[:b], reference[:b], target[b:].view(k, b), reference[b:].view(k, b),
                                     nu=self.options["nu"], positive=self.objective != "cl-n",
                                     negative=self.objective != "cl-p")

    def references(self) -> dict[str, list[str]]:
        """The validation references in PTB tokens without Java (treebank_tokenize), at the first validation."""
        if self._val_refs is None:
            wanted = set(self.val_images)
            refs: dict[str, list[str]] = {}
            for image, caption in zip(self.val.caption_image_index, self.val.captions, strict=True):
                if self.val.image_ids[image] in wanted:
                    refs.setdefault(self.val.image_ids[image], []).append(caption)
            self._val_refs = treebank_tokenize(refs)
        return self._val_refs

    def validate(self, model: nn.Module, device: torch.device) -> dict[str, float]:
        """CIDEr-D of greedy captions of the validation images."""
        predictions: dict[str, str] = {}
        with FeaturesReader(self.features) as reader:
            for ids, texts, _ in caption_batches(model, self.vocab, reader, self.val_images, "greedy",
                                              max_len=self.prep.max_words or 16,
                                              batch_size=self.options["val_batch_size"], device=device):
                predictions.update(zip(ids, texts, strict=True))
        return {"CIDEr": cider_d(predictions, self.references())}

    def checkpoint_info(self) -> dict:
        return {"model": self.model_name, "config": self.model_config, "vocab": self.vocab.words,
                "inputs": self.inputs, "schema": schema_version(self.model_name)}


def _objective_models(model_name: str, options: dict, vocab_path: str | None
                      ) -> tuple[dict | None, Captioner | None]:
    """The --init payload and the frozen --reference model the objective needs (with their checks)."""
    objective = options["objective"]
    if objective not in OBJECTIVES:
        raise VLToolsError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    reference, ref_payload = None, {}
    init_path = options["init"]
    if objective in ("cl", "cl-p", "cl-n"):
        if not options["reference"]:
            raise VLToolsError(f"--objective {objective} needs --reference REF.pt, the frozen reference captioner "
                               "(usually the MLE model)")
        loaded = load_model(options["reference"], "captioner", "reference")
        ref_payload, reference = loaded.payload, loaded.model
        reference.requires_grad_(False)
        if not init_path:
            if ref_payload["model"] != model_name:
                raise VLToolsError(f"{options['reference']}: the reference is a {ref_payload['model']} model; give "
                                   f"--init with the {model_name} checkpoint the target starts from")
            init_path = options["reference"]
            options["init"] = init_path      # recorded in the checkpoint's config and inputs
            log.info("the target starts from the reference %s (no --init given)", init_path)
    elif options["reference"]:
        raise VLToolsError(f"--reference is only used by the CL objectives, not {objective}")
    init = None
    if init_path:
        init = load_model(init_path, "captioner", "init").payload
        if init["model"] != model_name:
            raise VLToolsError(f"{init_path}: a {init['model']} checkpoint cannot initialise --model {model_name}")
        if vocab_path:
            raise VLToolsError("--vocab and --init both give the vocabulary; the target keeps its --init vocabulary, "
                               "drop --vocab")
    if reference is not None and init is not None and init["vocab"] != ref_payload["vocab"]:
        raise VLToolsError(f"{options['reference']}: its vocabulary differs from the target's ({init_path}); CL "
                           "compares both models' probabilities of the same token ids, so both must be trained "
                           "over the same vocabulary (the same captions and preprocessing)")
    return init, reference


def build_task(model_name: str, inputs: Sequence[str], config: dict, vocab: str | None = None,
               train_split: str = "train", val_split: str = "val") -> CaptioningTask:
    """The captioning task from `FEATS.h5 CAPS.jsonl`; the vocabulary comes from --init, --vocab or the captions."""
    if len(inputs) != 2:
        raise VLToolsError(f"{argument('model', model_name)} takes two inputs, FEATS.h5 CAPS.jsonl; got {len(inputs)}")
    features, captions = inputs
    options = config["task"]
    init, reference = _objective_models(model_name, options, vocab)
    records = read_records(captions, "captions")
    train, val = (read_split(captions, split, records, chosen_by) for split, chosen_by in
                  ((train_split, "train_split"), (val_split, "val_split")))
    needs = MODELS[model_name].features
    if reference is not None:
        needs = tuple(dict.fromkeys(needs + reference.features))
    for split in (train, val):
        check_images(split, features, captions, needs, who=f"{model_name} (and its reference)"
                     if reference is not None else model_name)
    if len(train.image_ids) < 2 and options["objective"] != "mle":
        raise VLToolsError(f"{captions}: the {train_split} split has one image; mismatched pairs need at least two")
    prep = CaptionPreprocessing.from_config(options)
    if init is not None:
        words = Vocabulary(init["vocab"])
    elif vocab is not None:
        words = load_vocabulary(vocab, train.captions)
    else:
        words = prep.build_vocab(train.captions)
    return CaptioningTask(model_name, config, features, captions, train, val, words, init, reference)

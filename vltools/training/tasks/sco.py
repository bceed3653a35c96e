"""The SCO task: L = L_mat + lambda L_gen (Eq. 4), validation by rsum (and mR, the mean of the six recalls).

L_mat is the structured hinge of section 3.4 summed over the batch's matched pairs and `negatives` (128)
mismatched captions and images each (`vltools.losses.sampled_hinge_loss`); L_gen is the negative log-likelihood
of each matched sentence under the generator started from the fused image vector, summed over its tokens and
`<end>` and over the batch (`vltools.losses.sequence_cross_entropy`, reduction "sum"), as the paper's sums
read. Inputs: `CONTEXT.h5 CONCEPTS.h5 CAPS.jsonl`, or one features file and the captions when the model uses
only the context (`model.use_concepts=false`) or only the concepts (`model.use_context=false`). "ctx + sen"
(`model.use_sentence=true`) reads `CONTEXT.h5 GENERATED.jsonl CAPS.jsonl`: the generated sentences (one per image,
`vltools caption` of every training and validation image) stand where the concept scores stand; with
`model.use_context=false` (the sentence alone, the paper's reading) the context file only names the images.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from torch import nn

from vltools.data.blocks import CaptionBlocks
from vltools.data.captions import CaptionSplit, load_vocabulary, read_split
from vltools.data.sco import (
    SENTENCES_COMMAND,
    GeneratedSentences,
    ImageVectors,
    SCODataset,
    VectorBlocks,
    check_global,
    check_split_images,
    collate_sco,
    sco_tokens,
)
from vltools.errors import VLToolsError, argument
from vltools.eval.retrieval import retrieval_metrics
from vltools.infer.similarity import similarity_blocks
from vltools.io.hdf5 import is_hdf5
from vltools.io.provenance import ids_digest
from vltools.io.records import read_records
from vltools.losses import sampled_hinge_loss, sequence_cross_entropy
from vltools.models import build_model, default_config, schema_version
from vltools.text.vocab import Vocabulary
from vltools.training.config import TRAIN_DEFAULTS

TASK_DEFAULTS: dict[str, object] = {
    "margin": 0.2,
    "negatives": 128,          # mismatched pairs per matched pair, each direction
    "gen_weight": 1.0,         # lambda of Eq. 4 (used when model.generation is true)
    "vocab_threshold": 4,
    "val_batch_size": 500,
}
# a batch of 256 leaves 255 candidates from which the 128 negatives of each pair are drawn
SCO_TRAIN_DEFAULTS = {**TRAIN_DEFAULTS, "batch_size": 256}


def defaults(model_name: str) -> dict[str, dict[str, object]]:
    """The `train`, `task` and `model` sections of SCO."""
    return {"train": dict(SCO_TRAIN_DEFAULTS), "task": dict(TASK_DEFAULTS), "model": default_config(model_name)}


def split_inputs(inputs: Sequence[str], model_config: dict) -> tuple[str | None, str | None, str]:
    """(context path or None, concepts path or None, captions path) from the command's inputs; for "ctx + sen"
    (`use_sentence`) the second is the generated sentences' path, see `sentence_inputs`."""
    use_context, use_concepts = bool(model_config["use_context"]), bool(model_config["use_concepts"])
    if model_config["use_sentence"]:
        return sentence_inputs(inputs, use_concepts)
    if len(inputs) == 3:
        context, concepts, captions = inputs
        return (context if use_context else None), (concepts if use_concepts else None), captions
    if len(inputs) == 2 and use_context != use_concepts:
        return (inputs[0] if use_context else None), (inputs[0] if use_concepts else None), inputs[1]
    raise VLToolsError(f"{argument('model', 'sco')} takes CONTEXT.h5 CONCEPTS.h5 CAPS.jsonl (or one features file "
                       "and the captions when model.use_context or model.use_concepts is false); got "
                       f"{len(inputs)} inputs")


def sentence_inputs(inputs: Sequence[str], use_concepts: bool) -> tuple[str, str, str]:
    """(context path, generated sentences path, captions path) of a "ctx + sen" model, checked; the context file
    names the images (the captioner read it) also when the model does not fuse it (`use_context` false)."""
    if use_concepts:
        raise VLToolsError("model.use_sentence=true puts the generated sentence in the concepts' place: set "
                           "model.use_concepts=false")
    if len(inputs) != 3:
        raise VLToolsError(f"{argument('model', 'sco')} with model.use_sentence=true takes CONTEXT.h5 "
                           f"GENERATED.jsonl CAPS.jsonl (the generated sentences: `{SENTENCES_COMMAND}`); got "
                           f"{len(inputs)} inputs")
    if is_hdf5(inputs[1]):
        raise VLToolsError(f"{inputs[1]}: is HDF5 where the generated sentences (a captions JSONL, "
                           f"`{SENTENCES_COMMAND}`) were expected; give CONTEXT.h5 GENERATED.jsonl CAPS.jsonl")
    return inputs[0], inputs[1], inputs[2]


def data_config(model_config: dict, context: str | None, concepts: str | None) -> dict:
    """The model config with context_dim and concept_dim (K) taken from the files; a changed default that
    disagrees with them is an error."""
    config = dict(model_config)
    base = default_config("sco")
    for key, path, is_concepts in (("context_dim", context, False), ("concept_dim", concepts, True)):
        if path is None:
            continue
        width = check_global(path, is_concepts)
        if config[key] not in (width, base[key]):
            raise VLToolsError(f"{path}: gives {key}={width} but the config says model.{key}={config[key]}; drop "
                               "that setting or give matching features")
        config[key] = width
    return config


class SCOTask:
    """Training data, L_mat + lambda L_gen, and rsum validation of one SCO configuration."""

    metric = "rsum"
    generator: torch.Generator | None = None  # the trainer's, reseeded from (seed, iteration, share) for each loss

    def __init__(self, config: dict, context: str | None, concepts: str | None, captions: str | os.PathLike,
                 train: CaptionSplit, val: CaptionSplit, vocab: Vocabulary, sentences: str | None = None) -> None:
        self.options, self.vocab, self.val = config["task"], vocab, val
        self.model_config = data_config(config["model"], context, concepts)
        self.model: nn.Module = build_model("sco", self.model_config, len(vocab))
        max_words = int(self.model_config["max_words"])
        generated = None
        if sentences is not None:
            generated = GeneratedSentences(sentences, vocab, max_words)
            for split in (train, val):
                generated.check(split.image_ids, captions)
        self.vectors = ImageVectors(context, concepts, generated)
        self.train_data = SCODataset(self.vectors, train, sco_tokens(vocab, train.captions, max_words))
        self.val_tokens = sco_tokens(vocab, val.captions, max_words)
        self.inputs = {"context": context, "concepts": concepts, "sentences": sentences, "captions": str(captions),
                       "train_split": train.name,
                       "val_split": val.name, "train_captions_digest": ids_digest(train.caption_ids),
                       "val_captions_digest": ids_digest(val.caption_ids)}

    def collate(self, items: Sequence[dict]) -> dict[str, torch.Tensor]:
        return collate_sco(items)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """L_mat (captions of the same image are never negatives) + lambda L_gen."""
        sims, logp = model(batch["context"], batch["concepts"], batch["tokens"], batch["lengths"],
                           batch.get("sentence_tokens"), batch.get("sentence_lengths"))
        same = batch["image_index"][:, None] == batch["image_index"][None, :]
        loss = sampled_hinge_loss(sims, margin=self.options["margin"], negatives=int(self.options["negatives"]),
                                  positive_mask=same, generator=self.generator)
        if logp is not None and self.options["gen_weight"] > 0:
            loss = loss + self.options["gen_weight"] * sequence_cross_entropy(logp, batch["tokens"][:, 1:],
                                                                               reduction="sum")
        return loss

    def validate(self, model: nn.Module, device: torch.device) -> dict[str, float]:
        """rsum, mR, R@1/5/10, medr and meanr both ways on the validation split."""
        size = int(self.options["val_batch_size"])
        sims = similarity_blocks(model, VectorBlocks(self.vectors, self.val.image_ids, size),
                                 CaptionBlocks(self.val_tokens, size), device=device, desc="validation")
        metrics = retrieval_metrics(sims.numpy(), self.val.caption_image_index)
        flat = {"rsum": metrics["rsum"], "mR": metrics["rsum"] / 6}
        for direction in ("i2t", "t2i"):
            flat.update({f"{direction}_{k}": v for k, v in metrics[direction].items() if v is not None})
        return flat

    def checkpoint_info(self) -> dict:
        return {"model": "sco", "config": self.model_config, "vocab": self.vocab.words, "inputs": self.inputs,
                "schema": schema_version("sco")}


def build_task(model_name: str, inputs: Sequence[str], config: dict, vocab: str | None = None,
               train_split: str = "train", val_split: str = "val") -> SCOTask:
    """The SCO task from its inputs (see the module docstring); the vocabulary is built from training captions
    unless `vocab` is given."""
    context, second, captions = split_inputs(inputs, config["model"])
    concepts, sentences = (None, second) if config["model"]["use_sentence"] else (second, None)
    records = read_records(captions, "captions")
    train, val = (read_split(captions, split, records, chosen_by) for split, chosen_by in
                  ((train_split, "train_split"), (val_split, "val_split")))
    for split in (train, val):
        for path in (context, concepts):
            if path is not None:
                check_split_images(split, path, captions)
    words = load_vocabulary(vocab, train.captions, threshold=int(config["task"]["vocab_threshold"]))
    return SCOTask(config, context, concepts, captions, train, val, words, sentences)

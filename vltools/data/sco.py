"""SCO's inputs: per-image vectors from two features files (context x and concept scores p, each in `/global`),
for "ctx + sen" one generated sentence per image (a captions JSONL of `vltools caption`) in place of the concepts,
and caption tokens cut to the model's maximum length.

The context file comes from `extract-regions --global tencrop` (or `avg` for the 1-crop ablation), the concept
file from `concept-scores` (its `global` attribute is "concepts", which is how the two are told apart). A model
that uses only one side reads only that file. Rows are read per batch, never the whole file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch

from vltools.data.blocks import BatchedDataset, Blocks
from vltools.data.captions import CaptionSplit
from vltools.errors import VLToolsError
from vltools.io.features import FeaturesReader
from vltools.io.held import FeaturesInMemory
from vltools.io.records import read_records
from vltools.text.captions import pad_tokens
from vltools.text.vocab import Vocabulary

CONCEPTS_GLOBAL = "concepts"  # the `global` attribute of a concept-scores file
CONTEXT_COMMAND = "vltools extract-regions IMAGES --regions none --global tencrop -o CONTEXT.h5"  # SCO's context
SENTENCES_COMMAND = "vltools caption --model CAPTIONER.pt CONTEXT.h5 -o GENERATED.jsonl"  # "ctx + sen"'s sentences


def sco_tokens(vocab: Vocabulary, captions: Sequence[str], max_words: int) -> list[list[int]]:
    """Token ids `<start> w1 .. wJ <end>` of each caption, cut to `max_words` words (the paper's J = 50)."""
    out = []
    for caption in captions:
        ids = vocab.encode(caption)
        out.append(ids if len(ids) <= max_words + 2 else [*ids[:max_words + 1], ids[-1]])
    return out


def check_global(path: str | os.PathLike, concepts: bool, dim: int | None = None) -> int:
    """The `/global` width of a context (`concepts` False) or concept-scores file, checked against `dim`."""
    with FeaturesReader(path) as reader:
        if "global" not in reader.fields:
            raise VLToolsError(f"{path}: has no /global dataset; SCO needs context (`{CONTEXT_COMMAND}`) or "
                               "concept scores (`vltools concept-scores IMAGES --model CONCEPTS.pt`)")
        is_concepts = reader.attrs.get("global") == CONCEPTS_GLOBAL
        width = reader.shape("global")[1]
    if is_concepts != concepts:
        wanted = "concept scores (vltools concept-scores)" if concepts else f"context (`{CONTEXT_COMMAND}`)"
        raise VLToolsError(f"{path}: is {'a concept-scores' if is_concepts else 'a context'} file where {wanted} "
                           "was expected; give the context file first and the concept scores second")
    if dim is not None and width != dim:
        what = "concepts (K)" if concepts else "context dimensions"
        raise VLToolsError(f"{path}: has {width} {what} but the model was built for {dim}; use the features the "
                           "model was trained with (or retrain)")
    return width


def check_split_images(split: CaptionSplit, features_path: str | os.PathLike,
                       captions_path: str | os.PathLike) -> None:
    """Every image of the split must have a row in the features file; the error names the first missing one."""
    with FeaturesReader(features_path) as reader:
        missing = [i for i in split.image_ids if i not in reader.index]
    if missing:
        raise VLToolsError(f"{captions_path}: image_id {missing[0]!r} has no row in {features_path} "
                           f"({len(missing)} image(s) missing); extract its features or drop its captions")


class GeneratedSentences:
    """One generated sentence per image from a captions JSONL (as `vltools caption` writes it), as token ids of
    `vocab` cut to `max_words` words: the image side of "ctx + sen"."""

    def __init__(self, path: str | os.PathLike, vocab: Vocabulary, max_words: int) -> None:
        self.path = str(path)
        records = read_records(path, "captions")
        first: dict[str, int] = {}
        for number, record in enumerate(records, 1):
            if record["image_id"] in first:
                raise VLToolsError(f"{path}: record {number} is a second caption of image_id {record['image_id']!r} "
                                   f"(first in record {first[record['image_id']]}); give one generated sentence per "
                                   f"image (`{SENTENCES_COMMAND}`)")
            first[record["image_id"]] = number
        tokens = sco_tokens(vocab, [record["caption"] for record in records], max_words)
        self.tokens = dict(zip(first, tokens, strict=True))

    def check(self, image_ids: Sequence[str], source: str | os.PathLike) -> None:
        """Every image of `image_ids` (named by `source`) must have a sentence; the error names the first missing."""
        missing = [i for i in image_ids if i not in self.tokens]
        if missing:
            raise VLToolsError(f"{self.path}: has no generated sentence of image_id {missing[0]!r} named by {source} "
                               f"({len(missing)} image(s) missing); caption every image (`{SENTENCES_COMMAND}`)")

    def take(self, ids: Sequence[str]) -> list[list[int]]:
        """The token ids of the images `ids`, in order."""
        return [self.tokens[i] for i in ids]


class ImageVectors:
    """Context and concept rows of images by id from up to two features files (None: that side is unused), and
    the images' generated sentences when the model reads them."""

    def __init__(self, context: str | os.PathLike | FeaturesInMemory | None,
                 concepts: str | os.PathLike | FeaturesInMemory | None,
                 sentences: GeneratedSentences | None = None) -> None:
        self.paths = (context or None, concepts or None)     # files, or features held in memory
        self.sentences = sentences
        self._readers: tuple[FeaturesReader | None, ...] | None = None
        self._pid: int | None = None

    @property
    def readers(self) -> tuple[FeaturesReader | None, ...]:
        if self._readers is None or self._pid != os.getpid():   # h5py handles must not cross a fork
            self._readers = tuple(FeaturesReader(p) if p else None for p in self.paths)
            self._pid = os.getpid()
        return self._readers

    def read(self, ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(context [B, I], concepts [B, K]) float32; an unused side is an empty [B, 0] array."""
        return tuple(np.zeros((len(ids), 0), np.float32) if reader is None else
                     np.asarray(reader.read(ids, ["global"])["global"], dtype=np.float32)
                     for reader in self.readers)

    def close(self) -> None:
        for reader in self._readers or ():
            if reader is not None:
                reader.close()
        self._readers = None


class VectorBlocks(Blocks):
    """(context, concepts) float32 tensors of `ids` in blocks of `batch_size`, for encode and validation; with
    generated sentences, their padded tokens and lengths follow."""

    def __init__(self, vectors: ImageVectors, ids: Sequence[str], batch_size: int) -> None:
        super().__init__(len(ids), batch_size, "image")
        self.vectors, self.ids = vectors, list(ids)

    def take(self, indices: Sequence[int]) -> tuple[torch.Tensor, ...]:
        ids = [self.ids[i] for i in indices]
        context, concepts = self.vectors.read(ids)
        block = (torch.from_numpy(context), torch.from_numpy(concepts))
        if self.vectors.sentences is None:
            return block
        return (*block, *pad_tokens(self.vectors.sentences.take(ids)))


class SCODataset(BatchedDataset):
    """One item per caption of a split: its image's context and concept vectors (and generated sentence's tokens,
    None when the model reads none) and its tokens."""

    def __init__(self, vectors: ImageVectors, split: CaptionSplit, tokens: Sequence[Sequence[int]]) -> None:
        self.vectors, self.split, self.tokens = vectors, split, list(tokens)

    def __len__(self) -> int:
        return len(self.split)

    def __getitems__(self, indices: Sequence[int]) -> list[dict]:
        images = self.split.caption_image_index[list(indices)]
        ids = [self.split.image_ids[i] for i in images]
        context, concepts = self.vectors.read(ids)
        sentences = self.vectors.sentences.take(ids) if self.vectors.sentences is not None else [None] * len(ids)
        return [{"context": context[n], "concepts": concepts[n], "sentence": sentences[n], "tokens": self.tokens[i],
                 "image_index": int(images[n])} for n, i in enumerate(indices)]


def collate_sco(items: Sequence[dict]) -> dict[str, torch.Tensor]:
    """Stack items into a batch in item order (with `sentence_tokens` and `sentence_lengths` when the items carry
    generated sentences)."""
    tokens, lengths = pad_tokens([item["tokens"] for item in items])
    batch = {"context": torch.from_numpy(np.stack([item["context"] for item in items])),
             "concepts": torch.from_numpy(np.stack([item["concepts"] for item in items])),
             "tokens": tokens, "lengths": lengths,
             "image_index": torch.tensor([item["image_index"] for item in items], dtype=torch.long)}
    if items and items[0]["sentence"] is not None:
        batch["sentence_tokens"], batch["sentence_lengths"] = pad_tokens([item["sentence"] for item in items])
    return batch


def model_vectors(config: dict, source: str | os.PathLike, concepts: str | os.PathLike | None,
                  sentences: str | os.PathLike | None = None, vocab: Vocabulary | None = None) -> ImageVectors:
    """The image vectors a trained SCO model (its `config`) reads: SOURCE is the context file and `concepts` the
    concept scores; a context-only model ignores `concepts`, a concepts-only model reads `concepts` (or SOURCE
    when `concepts` is not given). A "ctx + sen" model (`use_sentence`) reads the generated `sentences` (encoded
    with the model's `vocab`; vltools.infer.encode refuses them for the others); SOURCE names its images also when
    it represents them by the sentence alone (`use_context` false, its context vectors then unused). Widths are
    checked against the model's."""
    use_context, use_concepts = bool(config["use_context"]), bool(config["use_concepts"])
    if use_context and use_concepts and concepts is None:
        raise VLToolsError(f"{source}: this SCO model fuses context and concepts; give the concept scores with "
                           "--concepts CONCEPTS.h5 (vltools concept-scores)")
    generated = None
    if config.get("use_sentence"):
        if sentences is None or vocab is None:
            raise VLToolsError(f"{source}: this SCO model (ctx + sen) represents each image by a generated "
                               f"sentence; give them with --sentences GENERATED.jsonl (`{SENTENCES_COMMAND}`)")
        generated = GeneratedSentences(sentences, vocab, int(config["max_words"]))
    context_path = source if use_context or generated is not None else None
    concepts_path = (concepts if concepts is not None else source) if use_concepts else None
    if context_path is not None:
        check_global(context_path, False, int(config["context_dim"]))
    if concepts_path is not None:
        check_global(concepts_path, True, int(config["concept_dim"]))
    return ImageVectors(context_path, concepts_path, generated)

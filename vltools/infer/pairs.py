"""Difference descriptions of image pairs by an L2C model: batches of pairs read, encoded, beam-searched.

    loaded = load_l2c("l2c.pt")                              # model (eval), vocabulary, preprocessing
    texts = describe_pairs(loaded.model, maps, pairs, loaded.vocab, beam_size=3)

`caption --pairs` (the stage) and the L2C task's validation call these.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from vltools.data.l2c import FeatureMaps, PairSplit
from vltools.decoding.search import beam_search
from vltools.errors import VLToolsError
from vltools.io.checkpoints import load_checkpoint
from vltools.models import model_from_checkpoint
from vltools.models.l2c import L2C
from vltools.text.captions import CaptionPreprocessing, decode
from vltools.text.vocab import Vocabulary


@dataclass
class LoadedL2C:
    """An L2C checkpoint: model (eval mode), vocabulary and the caption preprocessing it was trained with."""

    model: L2C
    vocab: Vocabulary
    prep: CaptionPreprocessing


def load_l2c(path: str | os.PathLike) -> LoadedL2C:
    """The L2C model of checkpoint `path`; any other checkpoint is a one-line error."""
    payload = load_checkpoint(path)
    if payload.get("model") != "l2c":
        raise VLToolsError(f"{path}: a checkpoint of model {payload.get('model')!r}; describing pairs needs an l2c "
                           "checkpoint (vltools train --model l2c)")
    task = payload.get("train_state", {}).get("config", {}).get("task", {})
    model = model_from_checkpoint(payload, str(path))
    assert isinstance(model, L2C)
    return LoadedL2C(model, Vocabulary(payload["vocab"]), CaptionPreprocessing.from_config(task))


@torch.inference_mode()
def describe_batches(model: L2C, maps: FeatureMaps, image_a: Sequence[str], image_b: Sequence[str],
                     vocab: Vocabulary, beam_size: int = 3, max_len: int = 64, batch_size: int = 64,
                     device: torch.device | str = "cpu") -> Iterator[list[str]]:
    """The descriptions of pairs (image_a[i], image_b[i]), batch by batch in order (beam 1 is greedy)."""
    model.eval().to(device)
    for start in range(0, len(image_a), batch_size):
        featmap_a, mask_a = maps.read(image_a[start:start + batch_size])
        featmap_b, mask_b = maps.read(image_b[start:start + batch_size])
        tensors = [torch.from_numpy(x).to(device) for x in (featmap_a, mask_a, featmap_b, mask_b)]
        cond, _ = model.encode(*tensors)
        state, static = model.decoder.init_state(cond)
        decoded = beam_search(model.decoder.step, state, static, beam_size=beam_size, max_len=max_len)
        yield decode(vocab, decoded.tokens.cpu())


def describe_pairs(model: L2C, maps: FeatureMaps, pairs: PairSplit, vocab: Vocabulary, beam_size: int = 3,
                   max_len: int = 64, batch_size: int = 64, device: torch.device | str = "cpu") -> list[str]:
    """One description per pair of `pairs`, in their order."""
    return [text for batch in describe_batches(model, maps, pairs.image_a, pairs.image_b, vocab, beam_size, max_len,
                                               batch_size, device) for text in batch]

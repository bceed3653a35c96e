"""Difference descriptions of image pairs by an L2C model: batches of pairs read, encoded, beam-searched.

    loaded = load_model("l2c.pt", "l2c")                     # vltools.infer.loader: model, vocabulary, prep
    texts = describe_pairs(loaded.model, maps, pairs, loaded.vocab, beam_size=3)

`caption --pairs` (the stage) and the L2C task's validation call these.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch

from vltools.data.l2c import FeatureMaps, PairSplit
from vltools.decoding.search import beam_search
from vltools.models.l2c import L2C
from vltools.text.captions import decode
from vltools.text.vocab import Vocabulary


@torch.inference_mode()
def describe_batches(model: L2C, maps: FeatureMaps, image_a: Sequence[str], image_b: Sequence[str],
                     vocab: Vocabulary, beam_size: int = 3, max_len: int = 64, batch_size: int = 64,
                     device: torch.device | str = "cpu") -> Iterator[tuple[list[str], np.ndarray]]:
    """The descriptions of pairs (image_a[i], image_b[i]) and their log-probabilities, batch by batch in order (beam
    1 is greedy)."""
    model.eval().to(device)
    for start in range(0, len(image_a), batch_size):
        featmap_a, mask_a = maps.read(image_a[start:start + batch_size])
        featmap_b, mask_b = maps.read(image_b[start:start + batch_size])
        tensors = [torch.from_numpy(x).to(device) for x in (featmap_a, mask_a, featmap_b, mask_b)]
        cond, _ = model.encode(*tensors)
        state, static = model.decoder.init_state(cond)
        decoded = beam_search(model.decoder.step, state, static, beam_size=beam_size, max_len=max_len)
        yield decode(vocab, decoded.tokens.cpu()), decoded.logprob.float().cpu().numpy()


def describe_pairs(model: L2C, maps: FeatureMaps, pairs: PairSplit, vocab: Vocabulary, beam_size: int = 3,
                   max_len: int = 64, batch_size: int = 64, device: torch.device | str = "cpu") -> list[str]:
    """One description per pair of `pairs`, in their order."""
    return [text for batch, _ in describe_batches(model, maps, pairs.image_a, pairs.image_b, vocab, beam_size,
                                                  max_len, batch_size, device) for text in batch]

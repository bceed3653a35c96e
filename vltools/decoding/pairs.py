"""Difference descriptions of image pairs by an L2C model: batches of pairs read, encoded, beam-searched."""

from __future__ import annotations

import torch

from vltools.data.l2c import FeatureMaps, PairSplit
from vltools.decoding.search import beam_search
from vltools.io.progress import progress
from vltools.models.l2c import L2C
from vltools.text.captions import decode
from vltools.text.vocab import Vocabulary


@torch.inference_mode()
def describe_pairs(model: L2C, maps: FeatureMaps, pairs: PairSplit, vocab: Vocabulary, beam_size: int = 3,
                   max_len: int = 40, batch_size: int = 64, device: torch.device | str = "cpu",
                   desc: str = "describe") -> list[str]:
    """One description per pair of `pairs`, in their order (beam search; beam_size 1 is greedy)."""
    model.eval()
    texts: list[str] = []
    starts = range(0, len(pairs), batch_size)
    for start in progress(starts, total=len(starts), desc=desc, unit="batches"):
        stop = start + batch_size
        featmap_a, mask_a = maps.read(pairs.image_a[start:stop])
        featmap_b, mask_b = maps.read(pairs.image_b[start:stop])
        tensors = [torch.from_numpy(x).to(device) for x in (featmap_a, mask_a, featmap_b, mask_b)]
        cond, _ = model.encode(*tensors)
        state, static = model.decoder.init_state(cond)
        decoded = beam_search(model.decoder.step, state, static, beam_size=beam_size, max_len=max_len)
        texts += decode(vocab, decoded.tokens.cpu())
    return texts

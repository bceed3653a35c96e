"""Two-stage retrieval: a separable model proposes K candidates per query, cross-attention models rerank them.

Scoring every pair with SGR / SAF costs n_images x n_captions model evaluations; with a first stage
the cross-attention models score only n_queries x K pairs in each direction. Queries are processed in
blocks whose candidate union is encoded once (at most `items_per_block` items), with the models' global
vectors (SGR / SAF self-attention) computed once per block too, then each query is scored against its own
K candidates in one batched call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from vltools.io.progress import progress
from vltools.matching.embed import embed_all
from vltools.matching.similarity import (
    CaptionBlocks,
    FeatureBlocks,
    as_models,
    autocast,
    encode_captions,
    encode_images,
    ensemble_similarity,
    evaluating,
    global_vectors,
)
from vltools.matching.topk import search

TopK = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class FirstStage:
    """The separable model and its own caption tokens (its vocabulary may differ from the rerankers')."""

    model: nn.Module
    captions: CaptionBlocks
    index: str = "exact"
    nprobe: int = 16


def candidates(first: FirstStage, images: FeatureBlocks, k: int, device: torch.device,
               precision: str = "fp32") -> tuple[np.ndarray, np.ndarray]:
    """First-stage top-K caption indices per image [n_images, K] and image indices per caption [n_captions, K]."""
    image_emb = embed_all(first.model, images, "images", device, precision)
    caption_emb = embed_all(first.model, first.captions, "captions", device, precision)
    _, i2t = search(image_emb, caption_emb, k, first.index, first.nprobe, device)
    _, t2i = search(caption_emb, image_emb, k, first.index, first.nprobe, device)
    return i2t, t2i


def rerank_direction(models: Sequence[nn.Module], images: FeatureBlocks, captions: CaptionBlocks,
                     proposals: np.ndarray, top_k: int, query_side: str, device: torch.device,
                     items_per_block: int) -> TopK:
    """Rerank each query's candidate row of `proposals` by the models' mean similarity; keep the best `top_k`.

    `query_side` is "images" (i2t: candidates are caption indices) or "captions" (t2i: image indices).
    Missing candidates (index -1 from an approximate index) are dropped.
    """
    queries, items = (images, captions) if query_side == "images" else (captions, images)
    n_queries, width = proposals.shape
    keep = min(top_k, width)
    values = np.full((n_queries, keep), -np.inf, dtype=np.float32)
    indices = np.full((n_queries, keep), -1, dtype=np.int64)
    per_block = max(1, items_per_block // max(width, 1))
    for start in progress(range(0, n_queries, per_block), total=-(-n_queries // per_block),
                          desc=f"rerank {'i2t' if query_side == 'images' else 't2i'}", unit="blocks"):
        block = proposals[start:start + per_block]
        union, positions = np.unique(block[block >= 0], return_inverse=True)
        where = np.full(block.shape, -1, dtype=np.int64)
        where[block >= 0] = positions
        query_rows = range(start, start + len(block))
        if query_side == "images":
            query_embs = encode_images(models, images.take(query_rows), device)
            item_embs, lengths = encode_captions(models, captions.take(union), device)
            glo = global_vectors(models, query_embs, item_embs, lengths)
        else:
            query_embs, lengths = encode_captions(models, captions.take(query_rows), device)
            item_embs = encode_images(models, images.take(union), device)
            glo = global_vectors(models, item_embs, query_embs, lengths)
        for row in range(len(block)):
            chosen = torch.as_tensor(where[row][where[row] >= 0], device=device)
            if not len(chosen):
                continue
            query = [e[row:row + 1] for e in query_embs]
            item = [e[chosen] for e in item_embs]
            if query_side == "images":
                pick = [None if g is None else (g[0][row:row + 1], g[1][chosen]) for g in glo]
                scores = ensemble_similarity(models, query, item, lengths[chosen], pick)[0]
            else:
                pick = [None if g is None else (g[0][chosen], g[1][row:row + 1]) for g in glo]
                scores = ensemble_similarity(models, item, query, lengths[row:row + 1], pick)[:, 0]
            best = scores.topk(min(keep, len(chosen)))
            found = len(best.values)
            values[start + row, :found] = best.values.cpu().numpy()
            indices[start + row, :found] = union[chosen.cpu().numpy()[best.indices.cpu().numpy()]]
    return values, indices


def rerank(models: nn.Module | Sequence[nn.Module], first: FirstStage, images: FeatureBlocks,
           captions: CaptionBlocks, k_candidates: int, top_k: int, device: torch.device,
           precision: str = "fp32") -> tuple[TopK, TopK]:
    """(i2t, t2i) top-k (scores, indices) after reranking the first stage's `k_candidates` per query."""
    models = as_models(models)
    i2t_proposals, t2i_proposals = candidates(first, images, k_candidates, device, precision)
    with evaluating(models), torch.inference_mode(), autocast(device, precision):
        i2t = rerank_direction(models, images, captions, i2t_proposals, top_k, "images", device,
                               captions.batch_size)
        t2i = rerank_direction(models, images, captions, t2i_proposals, top_k, "captions", device,
                               images.batch_size)
    return i2t, t2i

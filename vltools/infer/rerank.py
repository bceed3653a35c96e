"""Two-stage retrieval: a separable model proposes K candidates per query, cross-attention models rerank them.

Scoring every pair with SGR / SAF costs n_images x n_captions model evaluations; with a first stage
the cross-attention models score only n_queries x K pairs in each direction. Queries are processed in
blocks whose candidate union (at most `items_per_block` items) is taken from the encoded candidates
(`EncodedItems`: each item encoded once, with the models' global vectors, SGR / SAF self-attention, and
kept within a memory budget), then each query is scored against its own K candidates in one batched call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence

from vltools.data.blocks import CaptionBlocks, FeatureBlocks
from vltools.infer.embed import embed_all
from vltools.infer.index import SavedIndex, matched_rows, remap
from vltools.infer.similarity import (
    as_models,
    autocast,
    encode_captions,
    encode_images,
    ensemble_similarity,
    evaluating,
    global_vectors,
)
from vltools.infer.topk import search
from vltools.io.progress import progress

TopK = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class FirstStage:
    """The separable model and its own caption tokens (its vocabulary may differ from the rerankers'); `saved`, a
    saved index of one side's embeddings by this model, searched instead of indexing that side again, with
    `saved_positions` (each indexed row's position among that side's items, -1 outside them); `embeddings`: the
    (images, captions) embeddings computed already (a model that reads image files, OpenCLIP), in place of
    encoding the features and `captions`."""

    model: nn.Module
    captions: CaptionBlocks | None
    index: str = "exact"
    nprobe: int = 16
    saved: SavedIndex | None = None
    saved_positions: np.ndarray | None = None
    embeddings: tuple[np.ndarray, np.ndarray] | None = None


def candidates(first: FirstStage, images: FeatureBlocks, k: int, device: torch.device,
               precision: str = "fp32") -> tuple[np.ndarray, np.ndarray]:
    """First-stage top-K caption indices per image [n_images, K] and image indices per caption [n_captions, K]."""
    image_emb, caption_emb = first.embeddings or (embed_all(first.model, images, "images", device, precision),
                                                  embed_all(first.model, first.captions, "captions", device, precision))
    return (proposals(first, image_emb, caption_emb, k, "captions", device),
            proposals(first, caption_emb, image_emb, k, "images", device))


def proposals(first: FirstStage, queries: np.ndarray, items: np.ndarray, k: int, items_side: str,
              device: torch.device) -> np.ndarray:
    """Top-K item indices per query: from the saved index when it holds the `items_side` embeddings (its rows
    of those items alone), else by `search` over `items`."""
    if first.saved is not None and first.saved.side == items_side:
        _, rows = first.saved.search(queries, k, first.nprobe, matched_rows(first.saved_positions))
        return remap(rows, first.saved_positions)
    return search(queries, items, k, first.index, first.nprobe, device)[1]


class EncodedItems:
    """The candidates' encodings (per model: embedding and global vector), kept for later query blocks.

    Every block of queries needs its candidates encoded, and candidates recur across blocks (each caption
    of a 25K gallery is a candidate of about n_queries x K / 25K queries), while encoding one (the image
    projection or the caption GRU) costs more than scoring one pair; items are kept up to `budget_mb`.
    """

    def __init__(self, models: Sequence[nn.Module], items: FeatureBlocks | CaptionBlocks, side: str,
                 device: torch.device, budget_mb: float) -> None:
        self.models, self.items, self.side, self.device = models, items, side, device
        self.rows: dict[int, tuple[list[torch.Tensor], list[torch.Tensor | None]]] = {}
        self.free = budget_mb * 2**20

    def _encode(self, indices: list[int]) -> dict[int, tuple[list[torch.Tensor], list[torch.Tensor | None]]]:
        if self.side == "captions":
            embs, lengths = encode_captions(self.models, self.items.take(indices), self.device)
            sizes = lengths.tolist()
        else:
            embs, lengths = encode_images(self.models, self.items.take(indices), self.device), None
            sizes = [None] * len(indices)
        glos = global_vectors(self.models, embs, self.side, lengths)
        return {item: ([e[j, :sizes[j]].clone() for e in embs], [None if g is None else g[j] for g in glos])
                for j, item in enumerate(indices)}

    def take(self, indices: np.ndarray) -> tuple[list[torch.Tensor], list[torch.Tensor | None], torch.Tensor | None]:
        """Per model the items' embeddings (captions 0-padded) and global vectors, and the caption lengths."""
        wanted = [int(i) for i in indices]
        missing = [i for i in dict.fromkeys(wanted) if i not in self.rows]
        fresh = self._encode(missing) if missing else {}
        for item, entry in fresh.items():
            size = sum(t.numel() * t.element_size() for t in entry[0])
            if size <= self.free:
                self.rows[item] = entry
                self.free -= size
        entries = [self.rows.get(i) or fresh[i] for i in wanted]
        embs = [pad_sequence([e[0][m] for e in entries], batch_first=True) for m in range(len(self.models))]
        glos = [None if entries[0][1][m] is None else torch.stack([e[1][m] for e in entries])
                for m in range(len(self.models))]
        lengths = (torch.tensor([len(e[0][0]) for e in entries], device=self.device)
                   if self.side == "captions" else None)
        return embs, glos, lengths


def rerank_direction(models: Sequence[nn.Module], images: FeatureBlocks, captions: CaptionBlocks,
                     proposals: np.ndarray, top_k: int, query_side: str, device: torch.device,
                     items_per_block: int, cache_mb: float = 2048.0, queries: np.ndarray | None = None) -> TopK:
    """Rerank each query's candidate row of `proposals` by the models' mean similarity; keep the best `top_k`.

    `query_side` is "images" (i2t: candidates are caption indices) or "captions" (t2i: image indices).
    Missing candidates (index -1 from an approximate index) are dropped. Candidates' encodings are kept
    for later blocks up to `cache_mb`. `queries`: only these queries (indices of rows of `proposals`, one
    row of the result each, in this order) are reranked, e.g. a sample to time a fraction of a large run.
    """
    item_side = "captions" if query_side == "images" else "images"
    encoded = EncodedItems(models, captions if query_side == "images" else images, item_side, device, cache_mb)
    order = np.arange(len(proposals)) if queries is None else np.asarray(queries, dtype=np.int64)
    if queries is not None:
        proposals = proposals[order]
    n_queries, width = proposals.shape
    keep = min(top_k, width)
    values = np.full((n_queries, keep), -np.inf, dtype=np.float32)
    indices = np.full((n_queries, keep), -1, dtype=np.int64)
    per_block = max(1, items_per_block // max(width, 1))
    for start in progress(range(0, n_queries, per_block), total=n_queries * width,
                          desc=f"rerank {'i2t' if query_side == 'images' else 't2i'}", unit="pairs",
                          size=lambda start: min(per_block, n_queries - start) * width):
        block = proposals[start:start + per_block]
        union, positions = np.unique(block[block >= 0], return_inverse=True)
        if not len(union):    # no query of the block has a candidate (an approximate first stage found none)
            continue
        where = np.full(block.shape, -1, dtype=np.int64)
        where[block >= 0] = positions
        query_rows = order[start:start + len(block)].tolist()
        item_embs, item_glo, lengths = encoded.take(union)
        if query_side == "images":
            query_embs = encode_images(models, images.take(query_rows), device)
            query_glo = global_vectors(models, query_embs, "images")
        else:
            query_embs, lengths = encode_captions(models, captions.take(query_rows), device)
            query_glo = global_vectors(models, query_embs, "captions", lengths)
        for row in range(len(block)):
            chosen = torch.as_tensor(where[row][where[row] >= 0], device=device)
            if not len(chosen):
                continue
            query = [e[row:row + 1] for e in query_embs]
            item = [e[chosen] for e in item_embs]
            mine = [None if g is None else g[row:row + 1] for g in query_glo]
            theirs = [None if g is None else g[chosen] for g in item_glo]
            if query_side == "images":
                given = list(zip(mine, theirs, strict=True))
                scores = ensemble_similarity(models, query, item, lengths[chosen], given)[0]
            else:
                given = list(zip(theirs, mine, strict=True))
                scores = ensemble_similarity(models, item, query, lengths[row:row + 1], given)[:, 0]
            best = scores.topk(min(keep, len(chosen)))
            found = len(best.values)
            values[start + row, :found] = best.values.cpu().numpy()
            indices[start + row, :found] = union[chosen.cpu().numpy()[best.indices.cpu().numpy()]]
    return values, indices


def rerank(models: nn.Module | Sequence[nn.Module], first: FirstStage, images: FeatureBlocks,
           captions: CaptionBlocks, k_candidates: int, top_k: int, device: torch.device,
           precision: str = "fp32", cache_mb: float = 2048.0) -> tuple[TopK, TopK]:
    """(i2t, t2i) top-k (scores, indices) after reranking the first stage's `k_candidates` per query."""
    proposals = candidates(first, images, k_candidates, device, precision)
    return rerank_candidates(models, images, captions, proposals, top_k, device, precision, cache_mb)


def rerank_candidates(models: nn.Module | Sequence[nn.Module], images: FeatureBlocks, captions: CaptionBlocks,
                      proposals: tuple[np.ndarray, np.ndarray], top_k: int, device: torch.device,
                      precision: str = "fp32", cache_mb: float = 2048.0, image_queries: np.ndarray | None = None,
                      caption_queries: np.ndarray | None = None) -> tuple[TopK, TopK]:
    """(i2t, t2i) top-k (scores, indices) of the first stage's (i2t, t2i) `proposals` (`candidates`) reranked by
    the models, moved to `device` in eval mode; `image_queries` / `caption_queries`: only those queries of each
    direction (see `rerank_direction`), so that a benchmark can time every N-th query of a run too long to finish."""
    models = as_models(models)
    i2t_proposals, t2i_proposals = proposals
    with evaluating(models, device), torch.inference_mode(), autocast(device, precision):
        i2t = rerank_direction(models, images, captions, i2t_proposals, top_k, "images", device,
                               captions.batch_size, cache_mb, image_queries)
        t2i = rerank_direction(models, images, captions, t2i_proposals, top_k, "captions", device,
                               images.batch_size, cache_mb, caption_queries)
    return i2t, t2i

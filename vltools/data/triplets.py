"""Triplet mining of Gordo & Larlus section 6.1, shared by `mine-triplets` and `train --model rmac`.

One round: sample N queries among the images that have relevant images, 9 relevant images of each (among its k
proxy neighbours), and fill a pool of P images (queries first, then the relevant ones, then random images of the
split). Relevant to a query = among its k proxy neighbours; irrelevant = every other pool image but the query.
For every query q and every relevant pool image d+, every irrelevant pool image d- makes a triplet; the `per_pair`
triplets with the largest loss m - phi_q.phi_+ + phi_q.phi_- under the current embeddings are kept (the loss before
the hinge's clipping, so the hardest come first even where the hinge is 0; ties go to the earlier pool image). With
no embeddings, `per_pair` irrelevant images are drawn at random. Everything depends only on the seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MiningOptions:
    """Sizes of one mining round (the paper's defaults)."""

    queries: int = 500
    relevant: int = 9
    pool: int = 5000
    per_pair: int = 100
    margin: float = 0.1


def sample_pool(neighbors: np.ndarray, candidates: np.ndarray, options: MiningOptions,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(queries, pool) as row numbers: the queries are the pool's first entries.

    `neighbors[row]` lists a row's k proxy neighbours (-1 padding); `candidates` are the rows of the split."""
    candidates = np.asarray(candidates, dtype=np.int64)
    has_relevant = candidates[(neighbors[candidates] >= 0).any(axis=1)]
    if len(has_relevant) == 0:
        raise ValueError("no image of the split has a relevant neighbour")
    queries = rng.choice(has_relevant, size=min(options.queries, len(has_relevant)), replace=False)
    chosen = [queries]
    for query in queries:
        relevant = neighbors[query][neighbors[query] >= 0]
        chosen.append(rng.choice(relevant, size=min(options.relevant, len(relevant)), replace=False))
    pool = list(dict.fromkeys(int(r) for r in np.concatenate(chosen)))
    if len(pool) < options.pool:
        others = np.setdiff1d(candidates, pool)
        pool += rng.choice(others, size=min(options.pool - len(pool), len(others)), replace=False).tolist()
    return queries, np.array(pool, dtype=np.int64)


def mine(queries: np.ndarray, pool: np.ndarray, neighbors: np.ndarray, embeddings: np.ndarray | None,
         options: MiningOptions, rng: np.random.Generator) -> np.ndarray:
    """(T, 3) row numbers (query, relevant, irrelevant): `per_pair` triplets for every query and relevant pool image,
    in query order, relevant images in pool order, hardest first. `embeddings[i]` is pool image i's (l2-normalised)
    embedding, or None for random irrelevant images."""
    position = {int(row): i for i, row in enumerate(pool)}
    triplets = []
    for query in queries:
        q = position[int(query)]
        relevant_rows = set(int(r) for r in neighbors[query] if r >= 0)
        is_relevant = np.array([int(row) in relevant_rows for row in pool])
        positives = np.flatnonzero(is_relevant)
        negatives = np.flatnonzero(~is_relevant & (np.arange(len(pool)) != q))
        if len(positives) == 0 or len(negatives) == 0:
            continue
        if embeddings is not None:
            scores = embeddings[negatives] @ embeddings[q]
            hardest = negatives[np.lexsort((negatives, -scores))][:options.per_pair]
        for positive in positives:
            if embeddings is None:
                chosen = rng.choice(negatives, size=min(options.per_pair, len(negatives)), replace=False)
            else:
                chosen = hardest
            triplets.append(np.stack([np.full(len(chosen), q), np.full(len(chosen), positive), chosen], axis=1))
    if not triplets:
        return np.zeros((0, 3), dtype=np.int64)
    return pool[np.concatenate(triplets)]


def mine_round(neighbors: np.ndarray, candidates: np.ndarray, options: MiningOptions, seed: int,
               embed=None) -> np.ndarray:
    """One whole round: sample the pool with `seed`, embed it with `embed(pool rows) -> [P, D]` (or not), mine."""
    rng = np.random.default_rng(seed)
    queries, pool = sample_pool(neighbors, candidates, options, rng)
    embeddings = None if embed is None else np.asarray(embed(pool), dtype=np.float64)
    return mine(queries, pool, neighbors, embeddings, options, rng)

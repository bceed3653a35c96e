"""Triplet mining against a brute-force search over a small pool; determinism by seed."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from vltools.data.triplets import MiningOptions, mine, mine_round, sample_pool


def world(seed=0, n=40, k=5):
    rng = np.random.default_rng(seed)
    neighbors = np.stack([rng.choice(np.setdiff1d(np.arange(n), [i]), k, replace=False) for i in range(n)])
    neighbors[3] = -1  # an image with no relevant neighbour is never a query
    emb = rng.standard_normal((n, 6))
    return neighbors, emb / np.linalg.norm(emb, axis=1, keepdims=True)


def test_pool_has_queries_first_their_relevant_images_and_the_requested_size():
    neighbors, _ = world()
    options = MiningOptions(queries=4, relevant=3, pool=25, per_pair=5)
    queries, pool = sample_pool(neighbors, np.arange(40), options, np.random.default_rng(1))
    assert pool[:4].tolist() == queries.tolist() and len(pool) == 25 == len(set(pool.tolist()))
    assert 3 not in queries
    for q in queries:
        assert len(set(neighbors[q]) & set(pool.tolist())) >= 3


def brute_force(queries, pool, neighbors, emb, margin, per_pair):
    kept = []
    for q in queries:
        for p in pool:                           # every relevant pool image of q
            if p not in neighbors[q]:
                continue
            losses = []
            for order, n in enumerate(pool):     # every irrelevant pool image other than q
                if n in neighbors[q] or n == q:
                    continue
                loss = margin - emb[q] @ emb[p] + emb[q] @ emb[n]
                losses.append((-loss, order, n))
            kept += [(q, p, n) for _, _, n in sorted(losses)[:per_pair]]
    return kept


@pytest.mark.parametrize("per_pair", [1, 4, 100])
def test_mining_equals_brute_force(per_pair):
    neighbors, emb = world()
    options = MiningOptions(queries=5, relevant=3, pool=30, per_pair=per_pair, margin=0.3)
    rng = np.random.default_rng(2)
    queries, pool = sample_pool(neighbors, np.arange(40), options, rng)
    got = mine(queries, pool, neighbors, emb[pool], options, rng)
    expected = brute_force(queries, pool, neighbors, emb, 0.3, per_pair)
    assert [tuple(t) for t in got.tolist()] == expected


def test_random_mining_is_seeded_and_respects_relevance():
    neighbors, _ = world()
    options = MiningOptions(queries=5, relevant=3, pool=30, per_pair=4)
    first = mine_round(neighbors, np.arange(40), options, seed=7)
    assert np.array_equal(first, mine_round(neighbors, np.arange(40), options, seed=7))
    assert not np.array_equal(first, mine_round(neighbors, np.arange(40), options, seed=8))
    for q, p, n in first:
        assert p in neighbors[q] and n not in neighbors[q] and n != q
    pairs = {(q, p) for q, p, _ in first}
    assert len(first) == 4 * len(pairs)
    assert all(len({n for qq, pp, n in first if (qq, pp) == pair}) == 4 for pair in itertools.islice(pairs, 5))

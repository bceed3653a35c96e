"""vltools.eval.semantic: NDCG@R by hand, PCC@R against np.corrcoef, AUC, user agreement, CSR, plot."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PIL import Image

from vltools.errors import VLToolsError
from vltools.eval.semantic import (
    curve_auc,
    curves_from_scores,
    plot_curves,
    semantic_from_rankings,
    semantic_from_sims,
    summarize_curves,
    triplet_sims_from_matrix,
    triplet_sims_from_rankings,
    user_agreement,
)
from vltools.io.hdf5 import write_arrays
from vltools.io.proxy import Csr, read_proxy
from vltools.io.sims import Sims
from vltools.text.sparse import csr_dot


def dense_to_csr(dense: np.ndarray) -> Csr:
    rows, cols = np.nonzero(dense)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=dense.shape[0]))])
    return Csr(dense[rows, cols], cols, indptr, dense.shape[1])


def random_tfidf(rng: np.random.Generator, n: int, vocab: int) -> np.ndarray:
    dense = rng.random((n, vocab)) * (rng.random((n, vocab)) < 0.2)
    dense[:, 0] += 0.01  # no empty row
    return dense / np.linalg.norm(dense, axis=1, keepdims=True)


def test_csr_dot_equals_dense_product():
    rng = np.random.default_rng(0)
    a, b = random_tfidf(rng, 7, 30), random_tfidf(rng, 11, 30)
    np.testing.assert_allclose(csr_dot(dense_to_csr(a), dense_to_csr(b)), a @ b.T, atol=1e-12)
    taken = dense_to_csr(b).take(np.array([4, 0, 4]))
    np.testing.assert_allclose(csr_dot(dense_to_csr(a), taken), a @ b[[4, 0, 4]].T, atol=1e-12)


def test_ndcg_hand_example_excludes_the_query():
    # database columns [q, d1, d2, d3, d4]; relevance to q [1.0, 0.2, 0.0, 0.6, 0.4]; the model ranks q itself
    # first (it must be removed), then d1, d2, d3, d4.  Model order relevances: 0.2, 0.0, 0.6, 0.4
    # DCG@1 = 0.2;                                   IDCG@1 = 0.6                               -> 1/3
    # DCG@2 = 0.2 + 0/log2(3);                       IDCG@2 = 0.6 + 0.4/log2(3)
    # DCG@4 = 0.2 + 0 + 0.6/log2(4) + 0.4/log2(5);   IDCG@4 = 0.6 + 0.4/log2(3) + 0.2/log2(4) + 0
    relevance = np.array([[1.0, 0.2, 0.0, 0.6, 0.4]])
    scores = np.array([[9.0, 0.9, 0.8, 0.7, 0.1]])
    ndcg, _ = curves_from_scores(scores, relevance, np.array([0]), [1, 2, 4])
    expected = [0.2 / 0.6, 0.2 / (0.6 + 0.4 / math.log2(3)),
                (0.2 + 0.6 / 2 + 0.4 / math.log2(5)) / (0.6 + 0.4 / math.log2(3) + 0.2 / 2)]
    np.testing.assert_allclose(ndcg[0], expected)


def test_pcc_is_pearson_of_the_top_r_per_query_averaged():
    rng = np.random.default_rng(1)
    scores, relevance = rng.normal(size=(6, 40)), rng.random((6, 40))
    query_column = np.array([0, 1, 2, -1, -1, 5])
    r_values = [2, 5, 10, 39]
    ndcg, pcc = curves_from_scores(scores, relevance, query_column, r_values)
    for q in range(6):
        columns = [c for c in range(40) if c != query_column[q]]
        order = sorted(columns, key=lambda c: -scores[q, c])
        for k, r in enumerate(r_values):
            top = order[:r]
            assert pcc[q, k] == pytest.approx(np.corrcoef(scores[q, top], relevance[q, top])[0, 1])
    summary = summarize_curves(ndcg, pcc, r_values)
    assert summary["pcc"]["10"] == pytest.approx(100 * pcc[:, 2].mean())
    assert summary["ndcg"]["39"] == pytest.approx(100 * ndcg[:, 3].mean())


def test_text_oracle_scores_100_and_undefined_values_are_left_out():
    rng = np.random.default_rng(2)
    relevance = rng.random((5, 30))
    relevance[4] = 0.0  # a query with no relevant image: NDCG and PCC undefined
    ndcg, pcc = curves_from_scores(relevance, relevance, np.full(5, -1), [1, 2, 10])
    summary = summarize_curves(ndcg, pcc, [1, 2, 10])
    assert summary["ndcg"] == pytest.approx({"1": 100.0, "2": 100.0, "10": 100.0})
    assert summary["pcc"]["1"] is None and summary["pcc"]["10"] == pytest.approx(100.0)
    assert summary["ndcg_auc"] == pytest.approx(100.0) and summary["pcc_auc"] == pytest.approx(100.0)
    assert summary["n_queries_without_relevant"] == 1


def test_auc_on_a_normalised_log_axis():
    assert curve_auc([1, 10, 100], [1.0, 1.0, 1.0]) == pytest.approx(1.0)
    # x = 0, 0.5, 1 on the log axis: trapezoids 0.5 * (0 + 1) / 2 + 0.5 * (1 + 1) / 2
    assert curve_auc([1, 10, 100], [0.0, 1.0, 1.0]) == pytest.approx(0.75)
    assert curve_auc([1, 2, 10], [None, 0.5, 0.5]) == pytest.approx(0.5)
    assert curve_auc([1, 2], [None, None]) is None


def test_user_agreement_oracle_reversed_and_weights():
    unanimous = np.array([[3, 0, 0], [0, 2, 0], [1, 0, 0]])
    oracle_a = np.array([1.0, 0.0, 1.0])
    oracle_b = np.array([0.0, 1.0, 0.0])
    assert user_agreement(oracle_a, oracle_b, unanimous) == (pytest.approx(100.0), 3)
    assert user_agreement(oracle_b, oracle_a, unanimous) == (pytest.approx(0.0), 3)
    split = np.array([[2, 1, 0], [1, 3, 0]])
    majority = user_agreement(np.array([1.0, 0.0]), np.array([0.0, 1.0]), split)[0]
    minority = user_agreement(np.array([0.0, 1.0]), np.array([1.0, 0.0]), split)[0]
    assert majority == pytest.approx(100 * (2 / 3 + 3 / 4) / 2)
    assert majority + minority == pytest.approx(100.0)
    # (2, 1, 1): choosing a scores w * 2/3 with w = 3/4, i.e. 0.5; a tie scores half of w, 0.375;
    # (0, 0, 2): every annotator chose neither, w = 0: the triplet counts, as 0
    weighted = np.array([[2, 1, 1], [2, 1, 1], [0, 0, 2]])
    score, used = user_agreement(np.array([1.0, 0.5, 1.0]), np.array([0.0, 0.5, 0.0]), weighted)
    assert used == 3 and score == pytest.approx(100 * (0.5 + 0.375 + 0.0) / 3)


def test_user_agreement_averages_every_annotated_triplet_with_the_papers_weight():
    # Gordo & Larlus section 3: s = w o_i / (o1 + o2), w = (o1 + o2) / (o1 + o2 + o3), averaged over every triplet
    # with at least one annotator. The model picks a, b, a, b, a, b (the last only has zeros: no annotator).
    counts = np.array([[3, 1, 1], [0, 4, 1], [1, 2, 2], [0, 0, 5], [0, 0, 3], [0, 0, 0]])
    sim_a = np.array([0.9, 0.1, 0.7, 0.2, 0.8, 0.3])
    sim_b = np.array([0.1, 0.6, 0.2, 0.5, 0.3, 0.4])
    # by hand: 4/5 * 3/4 = 0.6; 4/5 * 4/4 = 0.8; 3/5 * 1/3 = 0.2; 0 (w = 0); 0 (w = 0); no annotator: left out
    score, used = user_agreement(sim_a, sim_b, counts)
    assert used == 5
    assert score == pytest.approx(100 * (0.6 + 0.8 + 0.2 + 0.0 + 0.0) / 5)  # 32.0; dropping the two zeros gave 53.3
    assert score == pytest.approx(32.0)
    assert user_agreement(sim_a[3:], sim_b[3:], counts[3:]) == (pytest.approx(0.0), 2)
    assert user_agreement(sim_a[5:], sim_b[5:], counts[5:]) == (None, 0)


@pytest.fixture
def world(tmp_path):
    rng = np.random.default_rng(3)
    ids = [f"im{i}" for i in range(20)]
    tfidf = random_tfidf(rng, 20, 25)
    csr = dense_to_csr(tfidf)
    proxy = tmp_path / "proxy.h5"
    write_arrays(proxy, "proxy", {"ids": ids, "tfidf/data": csr.data, "tfidf/indices": csr.indices,
                                  "tfidf/indptr": csr.indptr, "tfidf/shape": np.array([20, 25])})
    queries = ids[:6]
    sims = rng.normal(size=(6, 20)) + tfidf[:6] @ tfidf.T
    return ids, tfidf, proxy, Sims(sims, queries, ids, None)


def brute_ndcg(scores: dict[str, float], relevance: dict[str, float], r: int) -> float:
    order = sorted(scores, key=lambda d: -scores[d])
    dcg = sum(relevance[d] / math.log2(i + 2) for i, d in enumerate(order[:r]))
    ideal = sorted(relevance.values(), reverse=True)
    return dcg / sum(v / math.log2(i + 2) for i, v in enumerate(ideal[:r]))


def test_sims_and_rankings_inputs_against_brute_force(world):
    ids, tfidf, proxy_path, sims = world
    proxy = read_proxy(proxy_path)
    ndcg, pcc, kept = semantic_from_sims(sims, proxy, [1, 3, 10, 50], "sims.h5")
    assert kept == [1, 3, 10]  # 19 database images per query
    for q, query in enumerate(sims.image_ids):
        scores = {d: sims.sims[q, j] for j, d in enumerate(ids) if d != query}
        relevance = {d: float(tfidf[q] @ tfidf[j]) for j, d in enumerate(ids) if d != query}
        for k, r in enumerate(kept):
            assert ndcg[q, k] == pytest.approx(brute_ndcg(scores, relevance, r))
    rankings = []
    for q, query in enumerate(sims.image_ids):
        order = np.argsort(-sims.sims[q])
        rankings.append({"query": query, "direction": "i2i", "ids": [ids[j] for j in order],
                         "scores": [float(sims.sims[q, j]) for j in order]})
    ndcg_r, pcc_r, kept_r = semantic_from_rankings(rankings, proxy, [1, 3, 10], "r.jsonl")
    assert kept_r == kept
    np.testing.assert_allclose(ndcg_r, ndcg)
    np.testing.assert_allclose(pcc_r, pcc)
    triplets = [{"query": "im0", "a": "im5", "b": "im9"}, {"query": "im3", "a": "im1", "b": "im0"}]
    from_matrix = triplet_sims_from_matrix(sims, triplets, "sims.h5")
    from_rankings = triplet_sims_from_rankings(rankings, triplets, "r.jsonl")
    np.testing.assert_allclose(from_matrix, from_rankings)
    np.testing.assert_allclose(from_matrix[0], [sims.sims[0, 5], sims.sims[3, 1]])
    with pytest.raises(VLToolsError, match="'im7'"):
        triplet_sims_from_matrix(sims, [{"query": "im7", "a": "im1", "b": "im2"}], "sims.h5")


def test_unknown_ids_and_bad_proxy(world, tmp_path):
    ids, _, proxy_path, sims = world
    proxy = read_proxy(proxy_path)
    stranger = Sims(sims.sims[:, :3], sims.image_ids, ["im0", "im1", "nope"], None)
    with pytest.raises(VLToolsError, match="'nope'"):
        semantic_from_sims(stranger, proxy, [1], "sims.h5")
    bad = tmp_path / "bad.h5"
    write_arrays(bad, "proxy", {"ids": ids, "tfidf/data": np.ones(3), "tfidf/indices": np.array([0, 1, 99]),
                                "tfidf/indptr": np.array([0, 3] + [3] * 19), "tfidf/shape": np.array([20, 25])})
    with pytest.raises(VLToolsError, match="inconsistent CSR"):
        read_proxy(bad)


def test_plot_is_a_png(tmp_path):
    ndcg = np.array([[0.5, 0.6, 0.7]])
    pcc = np.array([[np.nan, 0.2, 0.3]])
    path = tmp_path / "curves.png"
    plot_curves(path, summarize_curves(ndcg, pcc, [1, 10, 100]))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] > 100

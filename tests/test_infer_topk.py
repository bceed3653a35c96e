"""Top-k search: blocked exact search and top-k rows agree with a full argsort; FAISS when installed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vltools.errors import VLToolsError
from vltools.infer.topk import exact_search, search, topk_rows


def brute(queries: np.ndarray, gallery: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    scores = queries @ gallery.T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, axis=1), order


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(37, 8)).astype(np.float32), rng.normal(size=(53, 8)).astype(np.float32)


@pytest.mark.parametrize("k", [1, 5, 53, 80])
def test_topk_rows_matches_argsort(data, k):
    queries, gallery = data
    sims = queries @ gallery.T
    values, indices = topk_rows(torch.from_numpy(sims), k, block_rows=10)
    want_values, want_indices = brute(queries, gallery, min(k, 53))
    np.testing.assert_array_equal(indices.numpy(), want_indices)
    np.testing.assert_allclose(values.numpy(), want_values, rtol=1e-6)


@pytest.mark.parametrize("batch_queries,batch_gallery", [(1, 1), (5, 7), (100, 100)])
def test_exact_search_blocks_match_brute_force(data, batch_queries, batch_gallery):
    queries, gallery = data
    values, indices = exact_search(queries, gallery, 6, batch_queries, batch_gallery)
    want_values, want_indices = brute(queries, gallery, 6)
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_allclose(values, want_values, rtol=1e-5, atol=1e-6)


def test_empty_inputs_are_an_error(data):
    queries, _ = data
    with pytest.raises(VLToolsError, match="empty"):
        search(queries, np.zeros((0, 8), np.float32), 3)


def test_faiss_index_without_faiss_says_what_to_do(data, monkeypatch):
    """Run whether faiss is installed or not: its absence is simulated."""
    monkeypatch.setattr("vltools.infer.topk.faiss_available", lambda: False)
    queries, gallery = data
    with pytest.raises(VLToolsError, match="faiss.*not installed.*--index exact"):
        search(queries, gallery, 3, index="Flat")


def test_faiss_flat_equals_exact(data):
    pytest.importorskip("faiss")
    queries, gallery = data
    values, indices = search(queries, gallery, 5, index="Flat")
    want_values, want_indices = brute(queries, gallery, 5)
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_allclose(values, want_values, rtol=1e-5, atol=1e-5)


def test_faiss_ivf_with_all_lists_probed_is_exact(data):
    pytest.importorskip("faiss")
    queries, gallery = data
    _, indices = search(queries, gallery, 5, index="IVF4,Flat", nprobe=4)
    np.testing.assert_array_equal(indices, brute(queries, gallery, 5)[1])
    with pytest.raises(VLToolsError, match="factory string"):
        search(queries, gallery, 5, index="NotAnIndex")


def test_drop_self_removes_the_query_and_keeps_k():
    from vltools.infer.topk import drop_self

    values = np.array([[0.9, 0.8, 0.7], [0.95, 0.5, 0.1]])
    indices = np.array([[0, 2, 1], [2, 1, 0]])
    kept_values, kept_indices = drop_self(["a", "x"], ["a", "b", "c"], values, indices, 2)
    assert kept_indices.tolist() == [[2, 1], [2, 1]]
    assert kept_values.tolist() == [[0.8, 0.7], [0.95, 0.5]]

"""tf-idf proxy: stems, vocabulary and idf from the training split only, l2 rows, neighbours against brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from vltools.data.semantic import build_proxy
from vltools.text.tfidf import Stemmer, count_matrix, fit_tfidf, nearest_neighbors

# image -> captions; a, b, c train, d val ("zebra" appears only in val, so it is not in the vocabulary)
CORPUS = {
    "a": ["Two dogs running.", "a dog"],
    "b": ["a cat sleeping"],
    "c": ["A dog and cats"],
    "d": ["a running cat", "zebra"],
}
SPLITS = ["train", "train", "train", "val"]
# the same by hand: Snowball stems of each image's words
STEMS = {
    "a": ["two", "dog", "run", "a", "dog"],
    "b": ["a", "cat", "sleep"],
    "c": ["a", "dog", "and", "cat"],
    "d": ["a", "run", "cat", "zebra"],
}


def test_stemmer_lowercases_and_stems_words():
    assert Stemmer()("Two dogs, RUNNING; a man's generously") == ["two", "dog", "run", "a", "man", "s", "generous"]


@pytest.mark.parametrize("distinct", [True, False], ids=["distinct", "occurrences"])
def test_hand_corpus_against_direct_computation(distinct):
    # distinct: each image's stems as a set, so a's "dog", said twice, weighs as much as "two"
    proxy = build_proxy(list(CORPUS), SPLITS, list(CORPUS.values()), "train", k=2, distinct=distinct)
    tf = {image: {w: 1 if distinct else stems.count(w) for w in stems} for image, stems in STEMS.items()}
    assert tf["a"]["dog"] == (1 if distinct else 2)
    vocab = sorted({s for i in "abc" for s in STEMS[i]})
    assert proxy.vocab == vocab
    df = {w: sum(w in STEMS[i] for i in "abc") for w in vocab}
    idf = {w: math.log(3 / df[w]) for w in vocab}
    np.testing.assert_allclose(proxy.idf, [idf[w] for w in vocab])
    dense = proxy.tfidf.toarray()
    for row, image in enumerate(CORPUS):
        weights = np.array([tf[image].get(w, 0) * idf[w] for w in vocab])
        expected = weights / np.linalg.norm(weights)
        np.testing.assert_allclose(dense[row], expected, rtol=1e-6, atol=1e-7)
    # "a" is in every training image: idf 0; d = (a, run, cat) -> only run and cat weigh
    assert idf["a"] == 0
    run, cat = math.log(3 / 1), math.log(3 / 2)
    np.testing.assert_allclose(dense[3, vocab.index("run")], run / math.hypot(run, cat), rtol=1e-6)
    # neighbours within the split: a's are c (shares dog) then b; d (val) has none
    assert proxy.neighbors[0].tolist() == [2, 1]
    assert proxy.neighbors[3].tolist() == [-1, -1] and np.isnan(proxy.neighbor_sims[3]).all()
    np.testing.assert_allclose(proxy.neighbor_sims[0, 0], dense[0] @ dense[2], rtol=1e-6)


def test_idf_ignores_other_splits():
    texts = [["dog"], ["cat"], ["dog cat"], ["dog"], ["dog"]]
    proxy = build_proxy(list("vwxyz"), ["train", "train", "train", "test", "test"], texts, "train", k=1)
    np.testing.assert_allclose(proxy.idf, [math.log(3 / 2), math.log(3 / 2)])


def test_image_without_vocabulary_words_is_a_zero_row():
    proxy = build_proxy(["p", "q", "r"], ["train", "train", "val"], [["dog"], ["cat"], ["zebra"]], "train", k=1)
    assert proxy.tfidf[2].nnz == 0


def test_empty_training_split_is_an_error():
    from vltools.errors import VLToolsError

    with pytest.raises(VLToolsError, match="training split"):
        build_proxy(["p"], ["val"], [["dog"]], "train", k=1)


@pytest.mark.parametrize("dense_df", [0.0, 0.2, 1.0], ids=["dense", "mixed", "sparse"])
@pytest.mark.parametrize("k", [1, 5, 40])
def test_neighbours_equal_brute_force(k, dense_df):
    rng = np.random.default_rng(0)
    counts = sp.random(60, 30, density=0.15, random_state=1, format="lil")
    counts[::2, 0] = 0.5  # a frequent term
    counts = sp.csr_matrix(counts)
    counts.data = np.ceil(counts.data * 3)
    tfidf = fit_tfidf(sp.csr_matrix(counts), [f"t{i}" for i in range(30)], np.arange(40))
    rows = rng.permutation(60)[:45]
    neighbors, sims = nearest_neighbors(tfidf.matrix, rows, k, block=7, dense_df=dense_df)
    x = tfidf.matrix[rows].toarray().astype(np.float64)
    full = x @ x.T
    np.fill_diagonal(full, -np.inf)
    for i in range(len(rows)):
        order = np.lexsort((np.arange(len(rows)), -np.round(full[i], 5)))[:min(k, len(rows) - 1)]
        found = min(k, len(rows) - 1)
        np.testing.assert_allclose(sims[i, :found], full[i, order], atol=1e-5)
        assert set(neighbors[i, :found]) <= set(rows) and rows[i] not in neighbors[i, :found]
        assert (neighbors[i, found:] == -1).all()


def test_ties_go_to_the_lower_row():
    matrix = sp.csr_matrix(np.array([[1.0, 0], [1, 0], [1, 0], [1, 0], [0, 1]], dtype=np.float32))
    neighbors, _ = nearest_neighbors(matrix, np.arange(5), 2)
    assert neighbors.tolist()[:4] == [[1, 2], [0, 2], [0, 1], [0, 1]]


def test_count_matrix_counts_repeats_or_each_term_once():
    matrix, terms = count_matrix([["x", "y", "x"], [], ["y"]], 3)
    assert terms == ["x", "y"]
    assert matrix.toarray().tolist() == [[2, 1], [0, 0], [0, 1]]
    matrix, _ = count_matrix([["x", "y", "x"], [], ["y", "y", "y"]], 3, distinct=True)
    assert matrix.toarray().tolist() == [[1, 1], [0, 0], [0, 1]]

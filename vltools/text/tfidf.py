"""tf-idf bags of Snowball-stemmed words per image (Gordo & Larlus section 4) and each image's nearest images.

Every text of an image (its region or image captions, or its object names) is merged into one bag of words:
lower case, runs of letters and digits (`[a-z0-9]+`, so "man's" gives "man" and "s"), each stemmed by NLTK's
English Snowball stemmer. The vocabulary is the stems seen in the training split (sorted), the idf of a stem is
ln(n_train / df_train) (a stem in every training image weighs 0, a stop word in effect), a term's weight is its
count in the image times its idf, and each row is l2-normalised; stems outside the vocabulary are dropped, and an
image with no vocabulary stem gets the zero vector. Relevance between two images is the dot product of their rows.
A term's count is 1 for every term the image has when its words are taken as a set ("distinct", the paper's "single
set of words"), or its number of occurrences ("occurrences"): WORD_COUNTS, chosen by the caller.

Neighbours: for every image, the k images of its own split with the largest dot products (ties to the lower row),
itself excluded. The product runs in row blocks; the stems in more than DENSE_DF of a split's images go through a
dense matrix product (BLAS), the rest through a sparse one, so that Zipf-distributed vocabularies stay fast.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
import scipy.sparse as sp

WORD = re.compile(r"[a-z0-9]+")
WORD_COUNTS = ("distinct", "occurrences")   # how often an image's term counts: once, or once per occurrence
DENSE_DF = 0.05  # stems in more than this fraction of a split's images go to the dense part of the product
BLOCK_ROWS = 512


def words(text: str) -> list[str]:
    """The words of `text`: lower case, runs of letters and digits, in order (unstemmed)."""
    return WORD.findall(text.lower())


@cache
def _stemmer():
    from nltk.stem.snowball import SnowballStemmer

    return SnowballStemmer("english")


class Stemmer:
    """Snowball stems of the words of a text, with a cache (a corpus repeats a few thousand words millions of times)."""

    def __init__(self) -> None:
        self.cache: dict[str, str] = {}

    def stem(self, word: str) -> str:
        stem = self.cache.get(word)
        if stem is None:
            stem = self.cache[word] = _stemmer().stem(word)
        return stem

    def __call__(self, text: str) -> list[str]:
        """The stems of `text`'s words, in order."""
        return [self.stem(word) for word in words(text)]


def count_matrix(bags: Iterable[Sequence[str]], n_rows: int,
                 distinct: bool = False) -> tuple[sp.csr_matrix, list[str]]:
    """Term counts (n_rows x n_terms, CSR) of each row's stems (1 for each term a row has with `distinct`), and
    the terms in order of first appearance."""
    term_index: dict[str, int] = {}
    indptr = [0]
    columns: list[np.ndarray] = []
    for bag in bags:
        ids = np.fromiter((term_index.setdefault(stem, len(term_index)) for stem in bag), dtype=np.int64)
        columns.append(ids)
        indptr.append(indptr[-1] + len(ids))
    if len(columns) != n_rows:
        raise ValueError(f"{len(columns)} bags for {n_rows} rows")
    indices = np.concatenate(columns) if columns else np.zeros(0, dtype=np.int64)
    data = np.ones(len(indices), dtype=np.float64)
    matrix = sp.csr_matrix((data, indices, np.array(indptr)), shape=(n_rows, len(term_index)))
    matrix.sum_duplicates()
    if distinct:
        matrix.data[:] = 1.0
    return matrix, list(term_index)


@dataclass
class Tfidf:
    """The fitted proxy: l2-normalised tf-idf rows (float32 CSR), the vocabulary (stems) and their idf."""

    matrix: sp.csr_matrix
    vocab: list[str]
    idf: np.ndarray

    @property
    def empty_rows(self) -> np.ndarray:
        """Rows with no vocabulary stem (zero vectors)."""
        return np.flatnonzero(np.diff(self.matrix.indptr) == 0)


def fit_tfidf(counts: sp.csr_matrix, terms: Sequence[str], train_rows: np.ndarray) -> Tfidf:
    """Vocabulary and idf from the `train_rows` of `counts` only; every row weighted and l2-normalised."""
    if len(train_rows) == 0:
        raise ValueError("no training rows")
    df = np.bincount(counts[train_rows].indices, minlength=counts.shape[1])
    kept = np.flatnonzero(df > 0)
    order = kept[np.argsort(np.array([terms[i] for i in kept], dtype=object), kind="stable")]
    vocab = [terms[i] for i in order]
    idf = np.log(len(train_rows) / df[order])
    weighted = (counts[:, order] @ sp.diags(idf)).tocsr()
    weighted.eliminate_zeros()
    norms = np.sqrt(np.asarray(weighted.multiply(weighted).sum(axis=1)).ravel())
    scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
    normalised = sp.csr_matrix(sp.diags(scale) @ weighted, dtype=np.float32)
    normalised.sort_indices()
    return Tfidf(normalised, vocab, idf)


def _top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Columns of the k largest scores of each row, best first, ties to the lower column."""
    k = min(k, scores.shape[1])
    if k < scores.shape[1]:
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        # widen the partition to every column tied with the k-th score, so that ties go to the lower column
        kth = np.take_along_axis(scores, part, axis=1).min(axis=1, keepdims=True)
        candidates = [np.flatnonzero(row >= t) for row, t in zip(scores, kth[:, 0], strict=True)]
    else:
        candidates = [np.arange(scores.shape[1])] * scores.shape[0]
    columns = np.empty((scores.shape[0], k), dtype=np.int64)
    for r, cols in enumerate(candidates):
        columns[r] = cols[np.lexsort((cols, -scores[r, cols]))][:k]
    return columns, np.take_along_axis(scores, columns, axis=1)


def nearest_neighbors(matrix: sp.csr_matrix, rows: np.ndarray, k: int, block: int = BLOCK_ROWS,
                      dense_df: float = DENSE_DF) -> tuple[np.ndarray, np.ndarray]:
    """For each of `rows`, the k rows among `rows` (itself excluded) with the largest dot products.

    Returns (len(rows), k) global row numbers (-1 where the group has fewer than k + 1 rows) and their similarities
    (NaN there)."""
    rows = np.asarray(rows, dtype=np.int64)
    n = len(rows)
    neighbors = np.full((n, k), -1, dtype=np.int64)
    sims = np.full((n, k), np.nan, dtype=np.float32)
    if n < 2:
        return neighbors, sims
    group = matrix[rows]
    df = np.bincount(group.indices, minlength=group.shape[1])
    dense_columns = np.flatnonzero(df > dense_df * n)
    sparse_columns = np.flatnonzero(df <= dense_df * n)
    dense = np.ascontiguousarray(group[:, dense_columns].toarray(), dtype=np.float32)
    rare = group[:, sparse_columns].tocsr()
    rare_t = rare.T.tocsr()
    found = min(k, n - 1)
    for start in range(0, n, block):
        stop = min(start + block, n)
        scores = dense[start:stop] @ dense.T
        scores += (rare[start:stop] @ rare_t).toarray()
        scores[np.arange(stop - start), np.arange(start, stop)] = -np.inf
        columns, values = _top_k(scores, found)
        neighbors[start:stop, :found] = rows[columns]
        sims[start:stop, :found] = values
    return neighbors, sims


def word_columns(words: Sequence[str], vocab: Sequence[str]) -> list[int]:
    """The vocabulary column of each word's Snowball stem; a word whose stem is not in the vocabulary is an error
    naming it (ValueError)."""
    stemmer, position = Stemmer(), {stem: i for i, stem in enumerate(vocab)}
    columns = []
    for word in words:
        stems = stemmer(word)
        if len(stems) != 1 or stems[0] not in position:
            raise ValueError(f"{word!r} (stem {' '.join(stems) or 'none'!r}) is not in the vocabulary of "
                             f"{len(vocab)} training stems")
        columns.append(position[stems[0]])
    return columns

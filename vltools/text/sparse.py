"""Sparse tf-idf maths on the proxy's compressed sparse rows (vltools.io.proxy.Csr: numpy arrays, no scipy): the
relevance of images to images, as the dot products of their tf-idf rows."""

from __future__ import annotations

import numpy as np

from vltools.io.proxy import Csr, Proxy, ranges


def csr_dot(a: Csr, b: Csr) -> np.ndarray:
    """Dense a @ b.T (rows of a against rows of b) through an inverted index of b's columns."""
    if a.n_cols != b.n_cols:
        raise ValueError(f"column counts differ: {a.n_cols} vs {b.n_cols}")
    order = np.argsort(b.indices, kind="stable")
    b_rows = np.repeat(np.arange(b.n_rows), np.diff(b.indptr))[order]
    b_values = b.data[order].astype(np.float64)
    col_ptr = np.concatenate([[0], np.cumsum(np.bincount(b.indices, minlength=b.n_cols))])
    out = np.zeros((a.n_rows, b.n_rows))
    for row in range(a.n_rows):
        terms = a.indices[a.indptr[row]:a.indptr[row + 1]]
        weights = a.data[a.indptr[row]:a.indptr[row + 1]].astype(np.float64)
        lengths = col_ptr[terms + 1] - col_ptr[terms]
        positions = ranges(col_ptr[terms], lengths)
        out[row] = np.bincount(b_rows[positions], weights=b_values[positions] * np.repeat(weights, lengths),
                               minlength=b.n_rows)
    return out


def relevance(proxy: Proxy, query_rows: np.ndarray, database_rows: np.ndarray) -> np.ndarray:
    """tf-idf dot products of a proxy's rows, queries x database."""
    return csr_dot(proxy.tfidf.take(query_rows), proxy.tfidf.take(database_rows))

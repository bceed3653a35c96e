"""Proxy HDF5 files (`tfidf-proxy`): the tf-idf matrix of `score semantic`'s schema, plus what training needs.

Layout: `/ids` (N,), `/splits` (N,), `/tfidf/{data,indices,indptr,shape}` (CSR, rows l2-normalised), `/vocab`
(V,), `/idf` (V,), `/neighbors` (N, k) int32 row numbers into `/ids` within the row's split (-1: none),
`/neighbor_sims` (N, k) float32 (NaN: none). `score semantic` reads `/ids` and `/tfidf` only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from vltools.errors import input_error
from vltools.eval.semantic import read_proxy
from vltools.io.hdf5 import decode_strings, open_h5, write_arrays


@dataclass
class ProxyFile:
    """Everything in a proxy file, the tf-idf rows as a scipy CSR matrix."""

    ids: list[str]
    splits: list[str]
    tfidf: sp.csr_matrix
    vocab: list[str]
    idf: np.ndarray
    neighbors: np.ndarray
    neighbor_sims: np.ndarray

    def split_rows(self, split: str) -> np.ndarray:
        """Row numbers of the images of `split`, in file order."""
        return np.flatnonzero(np.array(self.splits, dtype=object) == split)


def write_proxy(path: str | os.PathLike | None, proxy: ProxyFile, attrs: dict[str, object]) -> None:
    """Write a proxy file atomically (or to standard output)."""
    matrix = proxy.tfidf
    write_arrays(path, "proxy", {
        "ids": list(proxy.ids), "splits": list(proxy.splits),
        "tfidf/data": matrix.data.astype(np.float32), "tfidf/indices": matrix.indices.astype(np.int32),
        "tfidf/indptr": matrix.indptr.astype(np.int64), "tfidf/shape": np.array(matrix.shape, dtype=np.int64),
        "vocab": list(proxy.vocab), "idf": np.asarray(proxy.idf, dtype=np.float64),
        "neighbors": proxy.neighbors.astype(np.int32), "neighbor_sims": proxy.neighbor_sims.astype(np.float32),
    }, attrs)


def read_proxy_file(path: str | os.PathLike) -> ProxyFile:
    """Read a whole proxy file (the CSR checks are `score semantic`'s)."""
    scoring = read_proxy(path)
    with open_h5(path, "proxy") as handle:
        for name in ("splits", "vocab", "idf", "neighbors", "neighbor_sims"):
            if name not in handle:
                raise input_error(path, None, f"proxy file lacks /{name}", "rebuild it with vltools tfidf-proxy")
        splits = decode_strings(handle["splits"][()])
        vocab = decode_strings(handle["vocab"][()])
        idf, neighbors, sims = handle["idf"][()], handle["neighbors"][()], handle["neighbor_sims"][()]
    n = len(scoring.ids)
    if len(splits) != n or neighbors.shape[0] != n or sims.shape != neighbors.shape or len(vocab) != len(idf) \
            or len(vocab) != scoring.tfidf.n_cols:
        raise input_error(path, None, f"inconsistent proxy file ({n} ids, {len(splits)} splits, neighbours "
                          f"{neighbors.shape}, {len(vocab)} stems, {scoring.tfidf.n_cols} columns)",
                          "rebuild it with vltools tfidf-proxy")
    csr = scoring.tfidf
    matrix = sp.csr_matrix((csr.data, csr.indices, csr.indptr), shape=(n, csr.n_cols))
    return ProxyFile(scoring.ids, splits, matrix, vocab, idf, neighbors.astype(np.int64), sims)

"""Proxy HDF5 files (`tfidf-proxy`): the tf-idf matrix of `score semantic`'s schema, plus what training needs.

Layout: `/ids` (N,), `/splits` (N,), `/tfidf/{data,indices,indptr,shape}` (CSR, rows l2-normalised), `/vocab`
(V,), `/idf` (V,), `/neighbors` (N, k) int32 row numbers into `/ids` within the row's split (-1: none),
`/neighbor_sims` (N, k) float32 (NaN: none). `score semantic` reads `/ids` and `/tfidf` only.

`/tfidf` holds whatever rows the proxy's `method` attribute names, each l2-normalised, relevance being their dot
product: tf-idf of stems (`captions`) or of object synsets (`objects`), with `/vocab` the terms and `/idf` their idf
(the `words` attribute says whether an image's term counted once, "distinct", or per occurrence, "occurrences");
or Fisher vectors of word2vec vectors (`word2vec-fv`), with `/vocab` naming each column "mu:k:d" or "sigma:k:d"
(the gradient for component k's mean or variance in dimension d) and `/idf` all ones. The method's settings are
attributes beside it.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from vltools.errors import input_error, shown_ids
from vltools.io.hdf5 import open_h5, read_strings, refuse_nonfinite, write_arrays
from vltools.io.records import read_records


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
        splits = read_strings(handle, "splits")
        vocab = read_strings(handle, "vocab")
        idf, neighbors, sims = handle["idf"][()], handle["neighbors"][()], handle["neighbor_sims"][()]
    n = len(scoring.ids)
    if len(splits) != n or neighbors.shape[0] != n or sims.shape != neighbors.shape or len(vocab) != len(idf) \
            or len(vocab) != scoring.tfidf.n_cols:
        raise input_error(path, None, f"inconsistent proxy file ({n} ids, {len(splits)} splits, neighbours "
                          f"{neighbors.shape}, {len(vocab)} stems, {scoring.tfidf.n_cols} columns)",
                          "rebuild it with vltools tfidf-proxy")
    bad = np.flatnonzero(((neighbors < -1) | (neighbors >= n)).any(axis=1))
    if bad.size:
        raise input_error(path, "/neighbors", f"image {scoring.ids[bad[0]]!r} has a neighbour that is no row of /ids "
                          f"(values must be -1 or 0..{n - 1}); the file is damaged", "rebuild it with vltools "
                          "tfidf-proxy")
    refuse_nonfinite(path, "idf", idf, vocab, id_kind="stem")
    refuse_nonfinite(path, "neighbor_sims", np.where(neighbors >= 0, sims, 0), scoring.ids)  # NaN: no neighbour
    csr = scoring.tfidf
    matrix = sp.csr_matrix((csr.data, csr.indices, csr.indptr), shape=(n, csr.n_cols))
    return ProxyFile(scoring.ids, splits, matrix, vocab, idf, neighbors.astype(np.int64), sims)


@dataclass
class Csr:
    """A compressed sparse row matrix held as numpy arrays (no scipy)."""

    data: np.ndarray
    indices: np.ndarray
    indptr: np.ndarray
    n_cols: int

    @property
    def n_rows(self) -> int:
        return len(self.indptr) - 1

    def take(self, rows: np.ndarray) -> Csr:
        """The given rows, in that order."""
        rows = np.asarray(rows, dtype=np.int64)
        starts, ends = self.indptr[rows], self.indptr[rows + 1]
        positions = ranges(starts, ends - starts)
        indptr = np.concatenate([[0], np.cumsum(ends - starts)])
        return Csr(self.data[positions], self.indices[positions], indptr, self.n_cols)


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of range(s, s + n) for each (s, n), vectorised."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(np.asarray(starts, dtype=np.int64) - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return offsets + np.arange(total)


@dataclass
class Proxy:
    """The l2-normalised tf-idf vectors of a proxy file, one row per id."""

    ids: list[str]
    tfidf: Csr

    @functools.cached_property
    def row(self) -> dict[str, int]:
        return {item: i for i, item in enumerate(self.ids)}

    def rows(self, ids: list[str], source: object, what: str) -> np.ndarray:
        """Row of each id; unknown ids are an error naming them."""
        row = self.row
        missing = [i for i in ids if i not in row]
        if missing:
            raise input_error(source, None, f"{len(missing)} {what} are not in the proxy file: "
                              f"{shown_ids(missing)}",
                              "build the proxy (tfidf-proxy) over the same images")
        return np.array([row[i] for i in ids], dtype=np.int64)


def proxy_words(path: str | os.PathLike) -> str:
    """How the proxy file counted each image's words: its `words` attribute ("distinct" or "occurrences"), or
    "occurrences" for a file written before the attribute existed, when every occurrence counted."""
    with open_h5(path, "proxy") as handle:
        return str(handle.attrs.get("words", "occurrences"))


def read_proxy(path: str | os.PathLike) -> Proxy:
    """Read the ids and the tf-idf CSR matrix of a proxy HDF5 file, checking the CSR structure."""
    with open_h5(path, "proxy") as handle:
        for name in ("ids", "tfidf/data", "tfidf/indices", "tfidf/indptr", "tfidf/shape"):
            if name not in handle:
                raise input_error(path, None, f"proxy file lacks /{name}", "rebuild it with tfidf-proxy")
        ids = read_strings(handle, "ids")
        data, indices = handle["tfidf/data"][()], handle["tfidf/indices"][()].astype(np.int64)
        indptr, shape = handle["tfidf/indptr"][()].astype(np.int64), tuple(int(s) for s in handle["tfidf/shape"][()])
    valid = (len(shape) == 2 and shape[0] == len(ids) == len(indptr) - 1 and indptr[0] == 0
             and indptr[-1] == len(data) == len(indices) and bool(np.all(np.diff(indptr) >= 0))
             and (indices.size == 0 or (indices.min() >= 0 and indices.max() < shape[1])))
    if not valid:
        raise input_error(path, "/tfidf", f"inconsistent CSR matrix (shape {shape}, {len(ids)} ids, "
                          f"{len(indptr)} indptr, {len(data)} values)", "rebuild it with tfidf-proxy")
    rows = np.repeat(np.arange(len(ids)), np.diff(indptr))    # the image of each stored value
    refuse_nonfinite(path, "tfidf/data", data, ids, rows)
    return Proxy(ids, Csr(data, indices, indptr, shape[1]))


def read_triplets(path: str | os.PathLike) -> list[dict]:
    """User-study triplets `{query, a, b, o1, o2, o3}` (o_i non-negative annotator counts), validated."""
    return read_records(path, "votes")

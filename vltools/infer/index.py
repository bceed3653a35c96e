"""Saved FAISS indexes over `encode`'s embeddings: built once (`vltools index`), then searched by many queries
(`match --index-file`, `vltools.search`, or as the first stage of two-stage reranking) without rebuilding.

The index is built and searched by the FAISS code of `vltools.infer.topk`; the file is `vltools.io.index`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vltools.errors import VLToolsError, shown_ids
from vltools.infer.settings import DEFAULT_FACTORY, DEFAULT_TRAIN_SIZE, INDEX_METRICS
from vltools.infer.topk import faiss_index, faiss_query, faiss_reason, require_faiss, train_and_add
from vltools.io.embeddings import EmbeddingsFile, open_embeddings
from vltools.io.hdf5 import read
from vltools.io.index import REBUILD, IndexFile, read_index, write_index
from vltools.io.progress import log

PathLike = str | os.PathLike
BLOCK_ROWS = 65536
PROVENANCE = ("model", "checkpoint", "checkpoint_digest", "side", "split", "ids_digest", "source")  # of encode's


def training_rows(emb, size: int | None, seed: int) -> np.ndarray | None:
    """`size` rows of the embeddings dataset `emb` sampled without replacement with `seed` (in file order), or
    None when `size` covers every row (the index then trains on all of them)."""
    if size is None or size >= len(emb):
        return None
    chosen = np.sort(np.random.default_rng(seed).choice(len(emb), size, replace=False))
    picked = []
    for start in range(0, len(emb), BLOCK_ROWS):
        inside = chosen[(chosen >= start) & (chosen < start + BLOCK_ROWS)]
        if len(inside):
            picked.append(read(emb, np.s_[start:start + BLOCK_ROWS])[inside - start])
    return np.concatenate(picked)


def _blocks(emb) -> Iterator[np.ndarray]:
    for start in range(0, len(emb), BLOCK_ROWS):
        yield read(emb, np.s_[start:start + BLOCK_ROWS])


def build_index(embeddings: PathLike, output: PathLike | None, factory: str = DEFAULT_FACTORY, metric: str = "ip",
                train_size: int | None = DEFAULT_TRAIN_SIZE, seed: int = 0) -> dict[str, object]:
    """Build a FAISS index (factory string `factory`, `metric` "ip" or "l2") over an embeddings file of `encode`,
    trained (IVF, PQ) on `train_size` rows sampled with `seed`, and save it with its provenance at `output`;
    returns that provenance."""
    if metric not in INDEX_METRICS:
        raise VLToolsError(f"metric {metric!r}: choose one of {', '.join(INDEX_METRICS)}")
    faiss = require_faiss("vltools index")
    source = open_embeddings(embeddings)
    try:
        if not source.ids:
            raise VLToolsError(f"{embeddings}: holds no embeddings; nothing to index")
        built = faiss_index(source.emb.shape[1], factory, metric, "--factory")
        needs_training = not built.is_trained
        train = training_rows(source.emb, train_size, seed) if needs_training else None
        train_and_add(built, _blocks(source.emb), f"--factory {factory!r}", train)
        attrs = {key: value.decode() if isinstance(value, bytes) else value
                 for key, value in source.handle.attrs.items() if key in PROVENANCE}
        attrs.update({"embeddings": str(embeddings), "metric": metric, "factory": factory,
                      "dims": int(source.emb.shape[1]), "seed": seed,
                      "train_size": 0 if not needs_training else len(source.ids) if train is None else len(train)})
        ids = source.ids
    finally:
        source.close()
    write_index(output, ids, faiss.serialize_index(built), attrs)
    return {**attrs, "count": len(ids)}


@dataclass
class SavedIndex:
    """A saved index loaded for search: its file (ids, provenance) and the FAISS index."""

    file: IndexFile
    index: object

    @property
    def path(self) -> Path:
        return self.file.path

    @property
    def ids(self) -> list[str]:
        return self.file.ids

    @property
    def side(self) -> str:
        return self.file.side

    def search(self, queries, k: int, nprobe: int = 16,
               rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, row indices) of every query row (an array-like of `dims` columns), higher is better;
        `rows`: only these indexed rows are searched (`matched_rows`)."""
        if queries.shape[1] != self.file.dims:
            raise VLToolsError(f"{self.path}: indexes {self.file.dims}-d embeddings, the queries are "
                               f"{queries.shape[1]}-d; encode them with the model the index was built from")
        try:
            return faiss_query(self.index, queries, k, nprobe, rows=rows)
        except RuntimeError as exc:
            if rows is None:
                raise VLToolsError(f"{self.path}: FAISS cannot search this index ({faiss_reason(exc)}); "
                                   f"{REBUILD}") from None
            raise VLToolsError(f"{self.path}: its {self.file.factory} index cannot search only the {len(rows)} of its "
                               f"{len(self.ids)} rows that are matched ({faiss_reason(exc)}); index the embeddings "
                               "of the matched items alone (vltools encode --captions CAPS --split SPLIT), or build "
                               "it with a factory that can, e.g. Flat, IVF1024,Flat or HNSW32") from None


def load_index(path: PathLike) -> SavedIndex:
    """Read a saved index and check that the FAISS index agrees with its provenance (rows, dims, metric)."""
    file = read_index(path)
    faiss = require_faiss(f"--index-file {path}")
    try:
        index = faiss.deserialize_index(file.data)
    except RuntimeError as exc:
        raise VLToolsError(f"{path}: /index is not a readable FAISS index ({faiss_reason(exc)}); {REBUILD}") from None
    metric = "l2" if index.metric_type == faiss.METRIC_L2 else "ip" if \
        index.metric_type == faiss.METRIC_INNER_PRODUCT else str(index.metric_type)
    found = {"count": index.ntotal, "dims": index.d, "metric": metric}
    recorded = {"count": len(file.ids), "dims": file.dims, "metric": file.metric}
    for key, value in recorded.items():
        if found[key] != value:
            raise VLToolsError(f"{path}: the index's {key} is {found[key]} but its provenance says {value}; {REBUILD}")
    return SavedIndex(file, index)


def check_model(saved: SavedIndex, digest: str | None, what: object) -> None:
    """Refuse queries (`what`, with the checkpoint `digest` they record) encoded by another checkpoint than the
    indexed embeddings, and, since nothing can show they are not, a side that records no digest when the other
    does (every file of `vltools encode` and `vltools index` records one); when neither does, warn."""
    indexed = saved.file.checkpoint_digest
    if indexed == digest:
        if digest is None:
            log.warning("%s: neither it nor %s records the checkpoint that encoded it, so whether one model encoded "
                        "both cannot be checked", what, saved.path)
        return
    if indexed is None:
        raise VLToolsError(f"{saved.path}: records no checkpoint digest, so whether {what} was encoded by the model "
                           f"of its embeddings cannot be checked; {REBUILD} from embeddings of vltools encode")
    if digest is None:
        raise VLToolsError(f"{what}: records no checkpoint digest, so whether the model of the embeddings indexed in "
                           f"{saved.path} encoded it cannot be checked; encode it with vltools encode")
    raise VLToolsError(f"{what}: encoded by another checkpoint ({digest}) than the embeddings indexed in "
                       f"{saved.path} ({indexed}); encode the queries with the index's model "
                       f"({saved.file.attrs.get('checkpoint', 'see vltools inspect')})")


def check_source(saved: SavedIndex, source: PathLike, what: str) -> None:
    """Warn when the index's embeddings were encoded from another file than `source` (the `what`, features or
    captions, being matched) as far as the path its provenance records shows: other features under the same
    image ids would propose wrong candidates, and the file's content cannot be compared."""
    recorded = saved.file.attrs.get("source")
    try:
        same = isinstance(recorded, str) and os.path.samefile(recorded, source)
    except OSError:
        same = False
    if not same:
        log.warning("%s: its embeddings were encoded from %s, not from the %s %s matched here; if those are other "
                    "%s, its candidates are wrong: index the embeddings of %s", saved.path, recorded or "an unrecorded "
                    "file", what, source, what, source)


def search_embeddings(saved: SavedIndex, queries: EmbeddingsFile, k: int,
                      nprobe: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """Top-k indexed rows for every query of an embeddings file of the same model."""
    check_model(saved, queries.checkpoint_digest, queries.path)
    return saved.search(queries.emb, k, nprobe)


def positions(saved: SavedIndex, ids: Sequence[str], what: str) -> np.ndarray:
    """For each indexed row, the position of its id in `ids` (-1 for rows outside them); every id of `ids` (the
    `what` being searched) must be indexed."""
    where = {item: number for number, item in enumerate(ids)}
    found = np.array([where.get(item, -1) for item in saved.ids], dtype=np.int64)
    indexed = set(saved.ids)
    absent = [item for item in ids if item not in indexed]
    if absent:
        raise VLToolsError(f"{saved.path}: lacks {len(absent)} of the {len(ids)} {what} to search "
                           f"({shown_ids(absent)}); build it over the embeddings of those {what}")
    return found


def remap(rows: np.ndarray, found: np.ndarray) -> np.ndarray:
    """Indexed row numbers (-1: none) as positions by `positions` (-1 where outside them)."""
    return np.where(rows >= 0, found[np.maximum(rows, 0)], -1)


def matched_rows(found: np.ndarray) -> np.ndarray | None:
    """The indexed rows that `positions` placed among the items searched (so that the index searches those alone
    and a row outside them never takes a candidate's place), or None when every indexed row is one of them."""
    return None if (found >= 0).all() else np.flatnonzero(found >= 0)

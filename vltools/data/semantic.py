"""Semantic retrieval data: the texts of each image grouped for the tf-idf proxy, and the proxy built from them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from vltools.errors import VLToolsError, input_error, shown_ids
from vltools.io.progress import log
from vltools.io.proxy import ProxyFile
from vltools.io.sims import Sims
from vltools.text.tfidf import Stemmer, count_matrix, fit_tfidf, nearest_neighbors


def image_texts(records: Sequence[dict], source: object, images: Sequence[dict] | None = None,
                images_source: object = None) -> tuple[list[str], list[str], list[list[str]]]:
    """(image ids, their splits, their texts) from caption or region records.

    Images are those of `images` (an images JSONL, in its order; an image without captions gets no text) or, without
    it, those the records name, in order of first mention. An image's split is its images record's `split`, else its
    captions' (which must agree)."""
    split_of: dict[str, str | None] = {}
    if images is not None:
        for record in images:
            split_of[record["image_id"]] = record.get("split")
        absent = sorted({r["image_id"] for r in records if r["image_id"] not in split_of})
        if absent:
            raise input_error(source, None, f"{len(absent)} images named by captions are absent from {images_source}: "
                              f"{shown_ids(absent)}", "give the images file of the same dataset")
    texts: dict[str, list[str]] = {item: [] for item in split_of}
    for number, record in enumerate(records, 1):
        image_id, split = record["image_id"], record.get("split")
        texts.setdefault(image_id, []).append(record["caption"])
        known = split_of.get(image_id)
        if split is not None and known is not None and split != known:
            raise input_error(source, f"record {number}", f"image {image_id!r} is in split {split!r} here and in "
                              f"{known!r} elsewhere", "give each image one split")
        if known is None:
            split_of[image_id] = split
    missing = [item for item, split in split_of.items() if split is None]
    if missing:
        raise input_error(source, None, f"{len(missing)} images have no split: {shown_ids(missing)}",
                          "add a 'split' field (train, val, test) to their captions or images records")
    ids = list(texts)
    return ids, [split_of[i] for i in ids], [texts[i] for i in ids]


def build_proxy(ids: Sequence[str], splits: Sequence[str], texts: Sequence[Sequence[str]], train_split: str,
                k: int, stem: bool = True) -> ProxyFile:
    """The tf-idf proxy of images' texts: vocabulary and idf from `train_split`, k neighbours within each split
    (k at most the largest split's size minus one: more cannot be found, and would only pad memory).

    `stem` False takes each text as one term (object synsets) instead of stemming its words."""
    stemmer = Stemmer()
    bags = ([s for text in group for s in stemmer(text)] if stem else list(group) for group in texts)
    counts, terms = count_matrix(bags, len(ids))
    split_array = np.array(splits, dtype=object)
    train_rows = np.flatnonzero(split_array == train_split)
    if len(train_rows) == 0:
        raise VLToolsError(f"no image is in the training split {train_split!r} (splits: "
                           f"{', '.join(sorted(set(splits)))}); give --train-split")
    tfidf = fit_tfidf(counts, terms, train_rows)
    if len(tfidf.empty_rows):
        log.warning("%d images have no vocabulary word and get the zero vector: %s", len(tfidf.empty_rows),
                    shown_ids([ids[i] for i in tfidf.empty_rows]))
    largest = max(Counter(splits).values())
    if k > max(largest - 1, 1):
        log.warning("k=%d neighbours is more than the largest split (%d images) can give; keeping k=%d", k, largest,
                    max(largest - 1, 1))
        k = max(largest - 1, 1)
    neighbors = np.full((len(ids), k), -1, dtype=np.int64)
    sims = np.full((len(ids), k), np.nan, dtype=np.float32)
    for split in dict.fromkeys(splits):
        rows = np.flatnonzero(split_array == split)
        if len(rows) <= k:
            log.warning("split %r has %d images: fewer than k + 1 = %d, so neighbour lists are padded with -1",
                        split, len(rows), k + 1)
        neighbors[rows], sims[rows] = nearest_neighbors(tfidf.matrix, rows, k)
    return ProxyFile(list(ids), list(splits), tfidf.matrix, tfidf.vocab, tfidf.idf, neighbors, sims)


def oracle_sims(proxy: ProxyFile, split: str, queries: int | None = None) -> Sims:
    """The text oracle (Table 2's first row): tf-idf similarities of the first `queries` images of `split` to every
    image of the split, as a queries x database sims matrix."""
    rows = proxy.split_rows(split)
    if len(rows) == 0:
        raise VLToolsError(f"no image in split {split!r} of the proxy (splits: {', '.join(sorted(set(proxy.splits)))})")
    query_rows = rows[:queries]
    sims = (proxy.tfidf[query_rows] @ proxy.tfidf[rows].T).toarray().astype(np.float32)
    return Sims(sims, [proxy.ids[r] for r in query_rows], [proxy.ids[r] for r in rows], None)

"""Semantic retrieval data: the texts of each image grouped for a proxy, and the proxies built from them (tf-idf,
word2vec + Fisher vector)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from vltools.errors import VLToolsError, first_line, input_error, shown_ids
from vltools.io.progress import log
from vltools.io.proxy import ProxyFile
from vltools.io.sims import Sims
from vltools.io.word2vec import read_word2vec_binary
from vltools.text.fisher import FisherSettings, fisher_columns, fisher_vectors, fit_gmm
from vltools.text.tfidf import Stemmer, count_matrix, fit_tfidf, nearest_neighbors, words
from vltools.text.word2vec import TooFewWords, Word2VecSettings, train_word2vec


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


def training_rows(splits: Sequence[str], train_split: str) -> np.ndarray:
    """Rows of the training split; none is an error naming the splits there are."""
    rows = np.flatnonzero(np.array(splits, dtype=object) == train_split)
    if len(rows) == 0:
        raise VLToolsError(f"no image is in the training split {train_split!r} (splits: "
                           f"{', '.join(sorted(set(splits)))}); give --train-split")
    return rows


def split_neighbors(matrix: sp.csr_matrix, splits: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's k nearest rows of its own split by dot product, and their similarities (k at most the largest
    split's size minus one: more cannot be found, and would only pad memory)."""
    largest = max(Counter(splits).values())
    if k > max(largest - 1, 1):
        log.warning("k=%d neighbours is more than the largest split (%d images) can give; keeping k=%d", k, largest,
                    max(largest - 1, 1))
        k = max(largest - 1, 1)
    split_array = np.array(splits, dtype=object)
    neighbors = np.full((len(splits), k), -1, dtype=np.int64)
    sims = np.full((len(splits), k), np.nan, dtype=np.float32)
    for split in dict.fromkeys(splits):
        rows = np.flatnonzero(split_array == split)
        if len(rows) <= k:
            log.warning("split %r has %d images: fewer than k + 1 = %d, so neighbour lists are padded with -1",
                        split, len(rows), k + 1)
        neighbors[rows], sims[rows] = nearest_neighbors(matrix, rows, k)
    return neighbors, sims


def build_proxy(ids: Sequence[str], splits: Sequence[str], texts: Sequence[Sequence[str]], train_split: str,
                k: int, stem: bool = True, distinct: bool = True) -> ProxyFile:
    """The tf-idf proxy of images' texts: vocabulary and idf from `train_split`, k neighbours within each split.

    `stem` False takes each text as one term (object synsets) instead of stemming its words. `distinct` counts each
    of an image's terms once: all its captions' words as "a single set of words" (Gordo & Larlus section 4);
    False counts every occurrence (the objects proxy's histogram: "counting how many objects of each synset")."""
    stemmer = Stemmer()
    bags = ([s for text in group for s in stemmer(text)] if stem else list(group) for group in texts)
    counts, terms = count_matrix(bags, len(ids), distinct)
    tfidf = fit_tfidf(counts, terms, training_rows(splits, train_split))
    if len(tfidf.empty_rows):
        log.warning("%d images have no vocabulary word and get the zero vector: %s", len(tfidf.empty_rows),
                    shown_ids([ids[i] for i in tfidf.empty_rows]))
    warn_same_words(tfidf.matrix, ids, tfidf.vocab, "tf-idf vector", "vocabulary stems" if stem else "terms")
    neighbors, sims = split_neighbors(tfidf.matrix, splits, k)
    return ProxyFile(list(ids), list(splits), tfidf.matrix, tfidf.vocab, tfidf.idf, neighbors, sims)


def build_fisher_proxy(ids: Sequence[str], splits: Sequence[str], texts: Sequence[Sequence[str]], train_split: str,
                       k: int, fisher: FisherSettings, word2vec: Word2VecSettings,
                       vectors_path: str | os.PathLike | None = None,
                       distinct: bool = True) -> tuple[ProxyFile, dict[str, object]]:
    """The word2vec + Fisher vector proxy (Gordo & Larlus Table 1): each image's words (unstemmed, all captions
    together) as one set (`distinct`; False: every occurrence counts), its l2-normalised Fisher vector under a
    mixture fitted on the training split's images' words so counted, k neighbours within each split. The word
    vectors are those of the captions' words in the word2vec binary file `vectors_path` or, without it, trained on
    the training split's captions. Nothing depends on the order of the images: the training captions are put in a
    canonical order (`train_word2vec`), the words sorted, the mixture fitted whatever its rows' order (`fit_gmm`).
    Returns the proxy (columns "mu:k:d" / "sigma:k:d", idf 1) and the settings and counts to record in its
    attributes."""
    train = training_rows(splits, train_split)
    bags = [[w for text in group for w in words(text)] for group in texts]
    if vectors_path is not None:
        word_vectors = read_word2vec_binary(vectors_path, {w for bag in bags for w in bag})
    else:
        sentences = [words(text) for row in train for text in texts[row]]
        try:
            word_vectors = train_word2vec(sentences, word2vec)
        except TooFewWords as exc:
            raise VLToolsError(f"word2vec: {exc}; lower --min-count or give --word-vectors") from None
        except ValueError as exc:     # gensim's own refusal: not a matter of counts
            raise VLToolsError(f"word2vec: gensim refused to train ({first_line(exc)}); check --dim, --window and "
                               "--epochs, or give --word-vectors") from None
    counts, terms = count_matrix(bags, len(ids), distinct)
    index = {word: i for i, word in enumerate(word_vectors.words)}
    known = np.array(sorted((i for i, term in enumerate(terms) if term in index), key=terms.__getitem__),
                     dtype=np.int64)
    vectors = word_vectors.vectors[[index[terms[i]] for i in known]].astype(np.float64)
    train_counts = np.asarray(counts[train][:, known].sum(axis=0)).ravel()
    if not train_counts.any():
        train_words = np.count_nonzero(np.asarray(counts[train].sum(axis=0)))
        raise input_error(vectors_path, None, f"none of the {train_words} words of the captions of the training "
                          f"split {train_split!r} has a vector here", "give the vectors of the captions' language, "
                          "or train them (no --word-vectors)")
    train_vectors, train_weights = vectors[train_counts > 0], train_counts[train_counts > 0]
    try:
        gmm = fit_gmm(train_vectors, train_weights, fisher)
    except ValueError as exc:
        raise VLToolsError(f"Gaussian mixture: {exc} of the training split; lower --components") from None
    counts = counts[:, known].tocsr()
    matrix = sp.csr_matrix(fisher_vectors(counts, vectors, gmm))
    empty = np.flatnonzero(np.diff(counts.indptr) == 0)
    if len(empty):
        log.warning("%d images have no word with a word vector and get the zero vector: %s", len(empty),
                    shown_ids([ids[i] for i in empty]))
    warn_same_words(counts, ids, [terms[i] for i in known], "Fisher vector", "words with a vector")
    neighbors, sims = split_neighbors(matrix, splits, k)
    columns = fisher_columns(fisher.components, word_vectors.dim)
    proxy = ProxyFile(list(ids), list(splits), matrix, columns, np.ones(len(columns)), neighbors, sims)
    source = ({"word_vectors": str(vectors_path)} if vectors_path is not None else
              {"word2vec": "skip-gram, 5 negative samples", "window": word2vec.window, "epochs": word2vec.epochs,
               "min_count": word2vec.min_count})
    return proxy, {**source, "word_dim": word_vectors.dim, "components": fisher.components,
                   "gmm_iterations": fisher.iterations, "gmm_starts": fisher.starts,
                   "gmm_log_likelihood": gmm.log_likelihood(train_vectors, train_weights), "seed": fisher.seed,
                   "words_with_vectors": len(known), "words_without_vectors": len(terms) - len(known),
                   "images_without_words": len(empty)}


def warn_same_words(counts: sp.csr_matrix, ids: Sequence[str], words: Sequence[str], vector: str,
                    having: str) -> None:
    """Warn when images (rows of `counts`, images x `words`) have equal vectors, as the same words in the same
    proportions give: they tie as each other's neighbours, whatever their images show."""
    shared = same_words(counts)
    if shared:
        largest = max(shared, key=len)
        log.warning("%d images share their %s with another image, having the same %s, and tie as each other's "
                    "neighbours (the largest group: %s, with %s); captions of a few common words (such as 'a' and "
                    "'the' alone) give this", sum(map(len, shared)), vector, having,
                    shown_ids([ids[i] for i in largest]),
                    ", ".join(sorted(repr(words[c]) for c in counts[largest[0]].indices)))


def same_words(counts: sp.csr_matrix) -> list[list[int]]:
    """The groups (two rows or more, in row order) of the rows of `counts` (images x words) that hold the same
    words in the same proportions, empty rows left out: their Fisher vectors are equal."""
    counts = counts.tocsr(copy=True)
    counts.sort_indices()
    groups: dict[bytes, list[int]] = {}
    for row in range(counts.shape[0]):
        start, end = counts.indptr[row], counts.indptr[row + 1]
        if start < end:
            share = counts.data[start:end] / counts.data[start:end].sum()
            groups.setdefault(counts.indices[start:end].tobytes() + share.tobytes(), []).append(row)
    return [rows for rows in groups.values() if len(rows) > 1]


def oracle_sims(proxy: ProxyFile, split: str, queries: int | None = None) -> Sims:
    """The text oracle (Table 2's first row): tf-idf similarities of the first `queries` images of `split` to every
    image of the split, as a queries x database sims matrix."""
    rows = proxy.split_rows(split)
    if len(rows) == 0:
        raise VLToolsError(f"no image in split {split!r} of the proxy (splits: {', '.join(sorted(set(proxy.splits)))})")
    query_rows = rows[:queries]
    sims = (proxy.tfidf[query_rows] @ proxy.tfidf[rows].T).toarray().astype(np.float32)
    return Sims(sims, [proxy.ids[r] for r in query_rows], [proxy.ids[r] for r in rows], None)

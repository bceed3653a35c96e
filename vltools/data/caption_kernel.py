"""The caption match kernel of Gordo & Larlus section 4 (Table 1, "Human captions: METEOR"): two images compared
sentence by sentence through their region captions, for the image pairs of annotated triplets (it is not scalable).

K(X, Y) = (sum over x in X of max over y in Y of M(x, y) + sum over y in Y of max over x in X of M(x, y))
/ (|X| + |Y|), with X the captions of the first image of the pair (the triplet's query), Y those of the second, and
M(x, y) a sentence similarity; for Table 1, METEOR 1.5 of x as the hypothesis against y as the single reference
(vltools.eval.caption.meteor_pairs). METEOR is not symmetric and the paper writes M(x, y) in both sums, so only the
|X| |Y| pairs (x, y) are scored and K(X, Y) is not K(Y, X) in general. X and Y keep every caption of the file, a
caption repeated by several regions counted each time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from vltools.errors import input_error, shown_ids
from vltools.io.records import ranking_records

# scores of sentence pairs (hypothesis, reference), each distinct pair of the iterable once
SentenceScores = Callable[[Iterable[tuple[str, str]]], Mapping[tuple[str, str], float]]


def image_captions(records: Iterable[dict]) -> dict[str, list[str]]:
    """Each image's captions (from captions or region records), in file order."""
    captions: dict[str, list[str]] = {}
    for record in records:
        captions.setdefault(record["image_id"], []).append(record["caption"])
    return captions


def triplet_pairs(triplets: Iterable[dict]) -> list[tuple[str, str]]:
    """The distinct (query, a) and (query, b) image pairs of user-study triplets, in order of first mention."""
    return list(dict.fromkeys(pair for t in triplets for pair in ((t["query"], t["a"]), (t["query"], t["b"]))))


def caption_kernel(captions: Mapping[str, Sequence[str]], pairs: Sequence[tuple[str, str]],
                   similarity: SentenceScores, source: object) -> np.ndarray:
    """K(X, Y) of each image pair (X: the first image's captions), every sentence pair asked of `similarity` in one
    call (so one METEOR process scores them all); an image without captions (in `source`) is a one-line error,
    raised before any sentence is scored."""
    missing = sorted({image for pair in pairs for image in pair if not captions.get(image)})
    if missing:
        raise input_error(source, None, f"{len(missing)} images of the pairs have no caption: {shown_ids(missing)}",
                          "give the captions of every image the pairs name (K needs at least one caption per image)")
    scores = similarity((x, y) for first, second in pairs for x in captions[first] for y in captions[second])
    kernel = np.empty(len(pairs))
    for row, (first, second) in enumerate(pairs):
        matrix = np.array([[scores[x, y] for y in captions[second]] for x in captions[first]])
        kernel[row] = (matrix.max(axis=1).sum() + matrix.max(axis=0).sum()) / sum(matrix.shape)
    return kernel


def kernel_rankings(pairs: Sequence[tuple[str, str]], kernel: np.ndarray) -> list[dict]:
    """i2i rankings records: each query (first image of a pair, in order of first mention) with the images it is
    paired with, by K descending (ties in pair order)."""
    paired: dict[str, list[int]] = {}
    for row, (query, _) in enumerate(pairs):
        paired.setdefault(query, []).append(row)
    longest = max(len(rows) for rows in paired.values())
    values = np.full((len(paired), longest), -np.inf)
    indices = np.full((len(paired), longest), -1, dtype=np.int64)
    for k, rows in enumerate(paired.values()):
        order = sorted(rows, key=lambda row: -kernel[row])
        values[k, :len(order)] = kernel[order]
        indices[k, :len(order)] = order
    return list(ranking_records(list(paired), [second for _, second in pairs], values, indices, "i2i"))

"""Image-text retrieval metrics as SCAN / VSE++ / SGRAF report them: R@1/5/10 both ways, medr, meanr, rsum.

Conventions (the same as SCAN's `evalrank` on real-valued scores):
- image-to-text (i2t): an image's rank is the best rank of any of its captions;
- text-to-image (t2i): a caption's rank is the rank of its own image;
- ranks are 0-based internally; R@K = percentage of queries with rank < K; medr = floor(median rank) + 1 and
  meanr = mean rank + 1 (1-based, as printed by those codes);
- ties are broken against the model (an item scored equal to the right answer counts as ranked above it),
  so a constant similarity matrix scores no better than chance; with continuous scores there are no ties;
- rsum = sum of the six recalls and mR = their mean (rsum / 6, the summary SCO reports); in the COCO 1K protocol
  (five folds of 1000 images and their captions, in file order) every number is the mean over the folds and rsum
  and mR come from the averaged recalls.

A similarity matrix can also come from elsewhere: a plain `.npy` array of images x captions (what the released
SCAN / SGRAF evaluation code saves), with ids from a captions file or in the precomp layout (the five captions of
image i in columns 5i .. 5i + 4). Several matrices with the same ids average into an ensemble (SGRAF = mean of SGR
and SAF).

For rankings JSONL (top-k lists) a right answer missing from the list has an unknown rank beyond k: it counts as
not found for R@K, medr is reported only when the median falls within the lists, and meanr only when every
query's answer is listed (otherwise null).
"""

from __future__ import annotations

import numpy as np

from vltools.errors import VLToolsError, input_error, shown_ids

PROTOCOLS = ("full", "coco1k")    # every caption ranked against all images, or in folds of fold_size images

KS = (1, 5, 10)
BLOCK = 1024


def _check(sims: np.ndarray, index: np.ndarray) -> None:
    if sims.ndim != 2 or index.shape != (sims.shape[1],):
        raise ValueError(f"sims {sims.shape} needs one caption_image_index entry per column, got {index.shape}")
    if index.size and (index.min() < 0 or index.max() >= sims.shape[0]):
        raise ValueError("caption_image_index points outside the rows of sims")


def image_to_text_ranks(sims: np.ndarray, caption_image_index: np.ndarray) -> np.ndarray:
    """0-based rank of each image's best-ranked own caption among all captions (ties against the model)."""
    index = np.asarray(caption_image_index)
    _check(sims, index)
    if np.bincount(index, minlength=sims.shape[0]).min(initial=1) == 0:
        raise ValueError("every image (row) needs at least one caption")
    own = sims[index, np.arange(sims.shape[1])]
    best = np.full(sims.shape[0], -np.inf)
    np.maximum.at(best, index, own)
    own_at_best = np.bincount(index, weights=own >= best[index], minlength=sims.shape[0])
    ranks = np.empty(sims.shape[0], dtype=np.int64)
    for start in range(0, sims.shape[0], BLOCK):
        block = slice(start, start + BLOCK)
        ranks[block] = (sims[block] >= best[block, None]).sum(axis=1) - own_at_best[block].astype(np.int64)
    return ranks


def text_to_image_ranks(sims: np.ndarray, caption_image_index: np.ndarray) -> np.ndarray:
    """0-based rank of each caption's own image among all images (ties against the model).

    Images without a caption take part as distractors.
    """
    index = np.asarray(caption_image_index)
    _check(sims, index)
    own = sims[index, np.arange(sims.shape[1])]
    counts = np.zeros(sims.shape[1], dtype=np.int64)
    for start in range(0, sims.shape[0], BLOCK):
        counts += (sims[start:start + BLOCK] >= own[None, :]).sum(axis=0)
    return counts - 1


def rank_summary(ranks: np.ndarray, ks: tuple[int, ...] = KS) -> dict[str, float | None]:
    """R@K in percent, medr and meanr (1-based) of 0-based ranks; `inf` marks an answer beyond a top-k list."""
    ranks = np.asarray(ranks, dtype=np.float64)
    summary: dict[str, float | None] = {f"R@{k}": float(100.0 * np.mean(ranks < k)) for k in ks}
    median = float(np.median(ranks))
    summary["medr"] = float(np.floor(median) + 1) if np.isfinite(median) else None
    summary["meanr"] = float(ranks.mean() + 1) if np.isfinite(ranks).all() else None
    return summary


def summarize(i2t_ranks: np.ndarray, t2i_ranks: np.ndarray) -> dict[str, object]:
    """The metrics JSON (without `protocol`) from both directions' ranks."""
    i2t, t2i = rank_summary(i2t_ranks), rank_summary(t2i_ranks)
    total = rsum(i2t, t2i)
    return {"i2t": i2t, "t2i": t2i, "rsum": total, "mR": total / (2 * len(KS)), "n_images": len(i2t_ranks),
            "n_captions": len(t2i_ranks)}


def rsum(i2t: dict, t2i: dict) -> float:
    """Sum of the six recalls (R@1, R@5, R@10 of both directions)."""
    return float(sum(i2t[f"R@{k}"] + t2i[f"R@{k}"] for k in KS))


def retrieval_metrics(sims: np.ndarray, caption_image_index: np.ndarray) -> dict[str, object]:
    """R@1/5/10, medr, meanr both ways and rsum for an n_images x n_captions similarity matrix.

    `caption_image_index[j]` is the row of caption j's image. Returns
    `{"i2t": {...}, "t2i": {...}, "rsum", "n_images", "n_captions"}` with recalls in percent.
    """
    sims = np.asarray(sims)
    return summarize(image_to_text_ranks(sims, caption_image_index), text_to_image_ranks(sims, caption_image_index))


def fold_metrics(sims: np.ndarray, caption_image_index: np.ndarray, fold_size: int = 1000) -> dict[str, object]:
    """The COCO 1K protocol: metrics averaged over consecutive folds of `fold_size` images and their captions.

    Every recall, medr and meanr is the mean over the folds; rsum is the sum of the averaged recalls
    (SCAN's five-fold printout sums the wrong numbers; this does not).
    """
    sims = np.asarray(sims)
    index = np.asarray(caption_image_index)
    n_images = sims.shape[0]
    if fold_size <= 0 or n_images % fold_size or n_images == 0:
        raise VLToolsError(f"{n_images} images cannot be split into folds of {fold_size}; the COCO 1K protocol "
                           "needs the 5000-image test set (5 x 1000 images); use --protocol full otherwise")
    folds = []
    for start in range(0, n_images, fold_size):
        columns = np.flatnonzero((index >= start) & (index < start + fold_size))
        folds.append(retrieval_metrics(sims[start:start + fold_size][:, columns], index[columns] - start))
    averaged = {direction: {key: float(np.mean([fold[direction][key] for fold in folds]))
                            for key in folds[0][direction]} for direction in ("i2t", "t2i")}
    total = rsum(averaged["i2t"], averaged["t2i"])
    return {**averaged, "rsum": total, "mR": total / (2 * len(KS)), "n_images": n_images,
            "n_captions": int(sims.shape[1]), "n_folds": len(folds)}


def rankings_ranks(rankings: list[dict], caption_ids: list[str], caption_image_ids: list[str],
                   source: object) -> tuple[np.ndarray, np.ndarray, int | None]:
    """0-based ranks (inf when beyond the listed top-k) of every image (i2t) and caption (t2i) query.

    `rankings` are validated rankings records (`{query, direction, ids, scores}`, ids in rank order); every
    image and every caption must be a query, and listed ids must be known. Also returns the length of the shortest
    list that leaves out some of its direction's candidates (None when every list ranks them all: its ranks, and
    every recall, are exact).
    """
    images = list(dict.fromkeys(caption_image_ids))
    image_of = dict(zip(caption_ids, caption_image_ids, strict=True))
    captions_of: dict[str, set[str]] = {}
    for caption, image in image_of.items():
        captions_of.setdefault(image, set()).add(caption)
    known = {"i2t": (captions_of, image_of), "t2i": (image_of, captions_of)}
    rows: dict[str, dict[str, list[str]]] = {"i2t": {}, "t2i": {}}
    for record in rankings:
        direction = record["direction"]
        if direction not in known:
            raise input_error(source, f"query {record['query']!r}", f"direction {direction!r}",
                              "retrieval scores i2t and t2i rankings")
        queries, targets = known[direction]
        if record["query"] not in queries:
            raise input_error(source, f"query {record['query']!r}", f"unknown {direction} query",
                              "the rankings and the captions file must describe the same images and captions")
        unknown = [i for i in record["ids"] if i not in targets]
        if unknown:
            raise input_error(source, f"query {record['query']!r}", f"ranks unknown ids {shown_ids(unknown)}",
                              "the rankings and the captions file must describe the same images and captions")
        rows[direction][record["query"]] = record["ids"]
    for direction, queries in (("i2t", images), ("t2i", caption_ids)):
        missing = [q for q in queries if q not in rows[direction]]
        if missing:
            raise input_error(source, None, f"{len(missing)} {direction} queries are missing: {shown_ids(missing)}",
                              "rank every image (i2t) and every caption (t2i) with match")

    def first_hit(ids: list[str], wanted: set[str]) -> float:
        return next((float(rank) for rank, item in enumerate(ids) if item in wanted), np.inf)

    i2t = np.array([first_hit(rows["i2t"][image], captions_of[image]) for image in images])
    t2i = np.array([first_hit(rows["t2i"][caption], {image_of[caption]}) for caption in caption_ids])
    candidates = {"i2t": len(caption_ids), "t2i": len(images)}
    cut = [len(ids) for direction, lists in rows.items() for ids in lists.values() if len(ids) < candidates[direction]]
    return i2t, t2i, min(cut, default=None)

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

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vltools.errors import VLToolsError, input_error
from vltools.io.hdf5 import decode_strings, open_h5, write_arrays

KS = (1, 5, 10)
BLOCK = 1024
PRECOMP_CAPTIONS_PER_IMAGE = 5


@dataclass
class Sims:
    """A similarity matrix (rows: images or queries; columns: captions or database items) and its ids."""

    sims: np.ndarray
    image_ids: list[str]
    caption_ids: list[str]
    caption_image_ids: list[str] | None


def write_sims(path: str | os.PathLike | None, sims: np.ndarray, image_ids: list[str], caption_ids: list[str],
               caption_image_ids: list[str] | None = None, attrs: dict[str, object] | None = None) -> None:
    """Write a sims HDF5 file (`/sims` n_images x n_captions and its ids) atomically, or to stdout for None/`-`."""
    sims = np.asarray(sims)
    if sims.shape != (len(image_ids), len(caption_ids)):
        raise ValueError(f"sims shape {sims.shape} != ({len(image_ids)} image ids, {len(caption_ids)} caption ids)")
    arrays: dict[str, object] = {"sims": sims, "image_ids": list(image_ids), "caption_ids": list(caption_ids)}
    if caption_image_ids is not None:
        if len(caption_image_ids) != len(caption_ids):
            raise ValueError("caption_image_ids must have one entry per caption")
        arrays["caption_image_ids"] = list(caption_image_ids)
    write_arrays(path, "sims", arrays, attrs)


def _unique(ids: list[str], path: object, name: str) -> None:
    seen: set[str] = set()
    for item in ids:
        if item in seen:
            raise input_error(path, f"/{name}", f"duplicate id {item!r}", "ids must be unique")
        seen.add(item)


def read_sims(path: str | os.PathLike) -> Sims:
    """Read and check a sims HDF5 file: a 2-D finite matrix whose shape matches its unique id lists."""
    with open_h5(path, "sims") as handle:
        for name in ("sims", "image_ids", "caption_ids"):
            if name not in handle:
                raise input_error(path, None, f"sims file lacks the /{name} dataset", "rewrite it with match --sims")
        sims = handle["sims"][()]
        image_ids = decode_strings(handle["image_ids"][()])
        caption_ids = decode_strings(handle["caption_ids"][()])
        caption_image_ids = (decode_strings(handle["caption_image_ids"][()]) if "caption_image_ids" in handle
                             else None)
    if sims.ndim != 2 or sims.shape != (len(image_ids), len(caption_ids)):
        raise input_error(path, "/sims", f"shape {sims.shape} does not match {len(image_ids)} image ids x "
                          f"{len(caption_ids)} caption ids")
    if not np.isfinite(sims).all():
        raise input_error(path, "/sims", "contains NaN or infinite scores", "check the model that wrote it")
    _unique(image_ids, path, "image_ids")
    _unique(caption_ids, path, "caption_ids")
    if caption_image_ids is not None and len(caption_image_ids) != len(caption_ids):
        raise input_error(path, "/caption_image_ids", f"{len(caption_image_ids)} entries for {len(caption_ids)} "
                          "captions")
    return Sims(sims, image_ids, caption_ids, caption_image_ids)


def read_npy_sims(path: str | os.PathLike, image_ids: list[str] | None = None, caption_ids: list[str] | None = None,
                  caption_image_ids: list[str] | None = None, prefix: str = "") -> Sims:
    """A plain `.npy` images x captions matrix as `Sims`.

    With ids (from a captions file: rows = images in order of first mention, columns = captions in order) the
    shape must fit them; without, the matrix must be in the precomp layout, 5 captions per image in order
    (n x 5n), and the ids are those `convert precomp` gives a split without an ids file: image `{prefix}{i}`,
    caption `{prefix}{i}#{k}`.
    """
    try:
        sims = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise input_error(path, None, f"not a readable .npy array ({exc})",
                          "give an images x captions similarity matrix saved with numpy.save") from None
    if sims.ndim != 2 or not np.issubdtype(sims.dtype, np.number):
        raise input_error(path, None, f"expected a 2-D numeric images x captions matrix, found {sims.dtype} "
                          f"{tuple(sims.shape)}", "give the similarity matrix itself")
    rows, columns = sims.shape
    if image_ids is None:
        per_image = PRECOMP_CAPTIONS_PER_IMAGE
        if rows == 0 or columns != per_image * rows:
            hint = " (it looks transposed: rows must be images)" if rows == per_image * columns else ""
            raise input_error(path, None, f"shape {rows} x {columns} is not the precomp layout of {per_image} "
                              f"captions per image (n x {per_image}n){hint}",
                              "give --captions CAPS.jsonl naming the columns' captions in order")
        image_ids = [f"{prefix}{i}" for i in range(rows)]
        caption_image_ids = [image_ids[j // per_image] for j in range(columns)]
        caption_ids = [f"{image}#{j % per_image}" for j, image in enumerate(caption_image_ids)]
    elif (rows, columns) != (len(image_ids), len(caption_ids or ())):
        raise input_error(path, None, f"shape {rows} x {columns} does not fit the {len(image_ids)} images x "
                          f"{len(caption_ids or ())} captions of the captions file",
                          "give the captions (and --split) the matrix was computed for")
    matrix = np.asarray(sims, dtype=np.float64 if sims.dtype == np.float64 else np.float32)
    if not np.isfinite(matrix).all():
        raise input_error(path, None, "contains NaN or infinite scores", "check the model that wrote it")
    return Sims(matrix, list(image_ids), list(caption_ids or ()), list(caption_image_ids or ()) or None)


def average_sims(parts: Sequence[tuple[object, Sims]]) -> Sims:
    """The ensemble of several (source, matrix) parts: the mean matrix, in float64. Every part must have the
    first part's image ids, caption ids and caption images in the same order."""
    first_source, first = parts[0]
    total = np.array(first.sims, dtype=np.float64)
    for source, part in parts[1:]:
        for name in ("image_ids", "caption_ids", "caption_image_ids"):
            mine, theirs = getattr(first, name), getattr(part, name)
            if mine != theirs:
                what = ("the same ids in another order" if mine is not None and theirs is not None
                        and sorted(mine) == sorted(theirs) else "other ids")
                raise input_error(source, f"/{name}", f"has {what} than {first_source}",
                                  "an ensemble averages matrices of the same images and captions, in the same order")
        total += part.sims
    return Sims(total / len(parts), first.image_ids, first.caption_ids, first.caption_image_ids)


def shown_ids(ids: list[str], limit: int = 5) -> str:
    """The first few ids of a list, quoted, with how many more there are (for error messages)."""
    more = f" and {len(ids) - limit} more" if len(ids) > limit else ""
    return ", ".join(repr(i) for i in ids[:limit]) + more


def caption_image_index(image_ids: list[str], caption_image_ids: list[str], source: object,
                        every_image_captioned: bool = True) -> np.ndarray:
    """Row of each caption's image; every caption's image must be listed and, unless told otherwise, every
    image must have a caption (retrieval needs one; self-retrieval keeps uncaptioned images as distractors)."""
    row = {image_id: i for i, image_id in enumerate(image_ids)}
    unknown = [c for c in dict.fromkeys(caption_image_ids) if c not in row]
    if unknown:
        raise input_error(source, "/caption_image_ids", f"{len(unknown)} captions' images are not in /image_ids: "
                          f"{shown_ids(unknown)}", "score the matching image and caption sets")
    index = np.array([row[c] for c in caption_image_ids], dtype=np.int64)
    lonely = [image_ids[i] for i in np.flatnonzero(np.bincount(index, minlength=len(image_ids)) == 0)]
    if lonely and every_image_captioned:
        raise input_error(source, "/image_ids", f"{len(lonely)} images have no caption: {shown_ids(lonely)}",
                          "every image needs at least one caption to be scored")
    return index


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
                   source: object) -> tuple[np.ndarray, np.ndarray, int]:
    """0-based ranks (inf when beyond the listed top-k) of every image (i2t) and caption (t2i) query.

    `rankings` are validated rankings records (`{query, direction, ids, scores}`, ids in rank order); every
    image and every caption must be a query, and listed ids must be known. Also returns the shortest list length.
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
    shortest = min(len(ids) for direction in rows.values() for ids in direction.values())
    return i2t, t2i, shortest

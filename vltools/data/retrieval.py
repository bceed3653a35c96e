"""Retrieval scores of files, for `score retrieval` and the Python API: sims HDF5 and .npy matrices (one, or
several averaged into an ensemble) or a rankings JSONL, each joined with the captions that name every caption's
image, then the metrics of `eval.retrieval`.

The captions come from the sims file itself or from a captions JSONL, whose captions (of the split match
ranked, unless one is named) must be the ranked ones in the same order: a mismatch is an error rather than a
silently wrong score.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from vltools.data.captions import split_of
from vltools.errors import VLToolsError, argument
from vltools.eval import retrieval as retrieval_eval
from vltools.eval.retrieval import PROTOCOLS
from vltools.io import sims as sims_io
from vltools.io.hdf5 import is_hdf5
from vltools.io.progress import log
from vltools.io.records import caption_ids, read_records

PathLike = str | os.PathLike


def is_matrix(path: PathLike) -> bool:
    """Whether a scores file is a similarity matrix (sims HDF5 or .npy) rather than a rankings JSONL."""
    return is_hdf5(path) or str(path).lower().endswith(".npy")


def checked_captions(scores: PathLike, sims: sims_io.Sims, captions: PathLike, split: str | None) -> list[str]:
    """The image of each caption of a sims file, from a captions JSONL, which must list the same captions in the
    same order (those of `split` when given, else of the split that match ranked)."""
    records = read_records(captions, "captions")
    ids = caption_ids(records, captions)
    if split is None:
        split = split_of(records, ids, sims.caption_ids)
    chosen = [n for n, record in enumerate(records) if split is None or record.get("split") == split]
    if [ids[n] for n in chosen] != list(sims.caption_ids):
        raise VLToolsError(f"{captions}: its captions{f' of split {split!r}' if split else ''} are not the "
                           f"{len(sims.caption_ids)} captions of {scores} in the same order; give the captions file "
                           f"(and {argument('split')}) that match ranked")
    images = [records[n]["image_id"] for n in chosen]
    if sims.caption_image_ids is not None and images != list(sims.caption_image_ids):
        n = next(k for k, (mine, theirs) in enumerate(zip(images, sims.caption_image_ids, strict=True))
                 if mine != theirs)
        raise VLToolsError(f"{captions}: caption {sims.caption_ids[n]!r} is of image {images[n]!r}, but {scores} "
                           f"ranked it as a caption of {sims.caption_image_ids[n]!r}; give the captions file match "
                           f"ranked, or drop {argument('captions')} (the sims file knows each caption's image)")
    return images


def captions_of(captions: PathLike, split: str | None, ranked: Iterable[str] = ()) -> tuple[list[str], list[str]]:
    """Caption ids and their images' ids from a captions JSONL, in file order: only `split`'s when given, else
    those of the split holding every `ranked` caption id (what match ranked), else all."""
    records = read_records(captions, "captions")
    ids = caption_ids(records, captions)
    if split is None:
        split = split_of(records, ids, ranked)
        if split is not None:
            log.info("scoring the captions of split %r of %s, which were ranked (--split chooses another)", split,
                     captions)
    if split is not None:
        chosen = [n for n, record in enumerate(records) if record.get("split") == split]
        if not chosen:
            found = sorted({str(r["split"]) for r in records if "split" in r})
            raise VLToolsError(f"{captions}: no captions in split {split!r} (splits present: "
                               f"{', '.join(found) or 'none'}); choose one with {argument('split')}")
        records = [records[n] for n in chosen]
        ids = [ids[n] for n in chosen]
    return ids, [record["image_id"] for record in records]


def read_matrix(path: PathLike, captions: PathLike | None = None, split: str | None = None) -> sims_io.Sims:
    """A sims HDF5 file, or a plain .npy matrix with ids from `captions` (and `split`) or the precomp layout."""
    if is_hdf5(path):
        sims = sims_io.read_sims(path)
        if captions is not None:
            sims.caption_image_ids = checked_captions(path, sims, captions, split)
        return sims
    if captions is None:
        return sims_io.read_npy_sims(path, prefix=f"{split}_" if split else "")
    ids, images = captions_of(captions, split)
    return sims_io.read_npy_sims(path, list(dict.fromkeys(images)), ids, images)


def sims_scores(sims: sims_io.Sims, source: object, protocol: str = "full", fold_size: int = 1000) -> dict:
    """The retrieval metrics of one similarity matrix whose captions know their images (read from a file, or
    given from memory: either way its scores must be finite)."""
    sims_io.refuse_nonfinite_sims(sims.sims, sims.image_ids, source)
    if sims.caption_image_ids is None:
        raise VLToolsError(f"{source}: no /caption_image_ids dataset; retrieval needs the image of each caption")
    index = sims_io.caption_image_index(sims.image_ids, sims.caption_image_ids, source)
    if protocol == "coco1k":
        result = retrieval_eval.fold_metrics(sims.sims, index, fold_size)
        log.info("%d folds of %d images", result["n_folds"], fold_size)
        return result
    return retrieval_eval.retrieval_metrics(sims.sims, index)


def rankings_scores(path: PathLike, captions: PathLike | None, split: str | None = None,
                    protocol: str = "full") -> dict:
    """The retrieval metrics of a rankings JSONL (top-k lists): an answer beyond a list counts as not found."""
    if captions is None:
        raise VLToolsError(f"{path}: rankings need {argument('captions')} (the captions they rank) to know each "
                           "caption's image")
    if protocol != "full":
        raise VLToolsError(f"{path}: {argument('protocol', protocol)} needs a sims HDF5 file (top-k rankings cannot "
                           "be re-ranked within folds); rerun match with --sims")
    ranked = read_records(path, "rankings")
    ids, images = captions_of(captions, split, (record["query"] for record in ranked if record["direction"] == "t2i"))
    i2t, t2i, shortest = retrieval_eval.rankings_ranks(ranked, ids, images, path)
    if shortest is not None and shortest < 10:
        log.warning("the shortest ranking lists only %d ids: recalls at larger K are lower bounds", shortest)
    return retrieval_eval.summarize(i2t, t2i)


def score_retrieval(scores: Sequence[PathLike], captions: PathLike | None = None, protocol: str = "full",
                    fold_size: int = 1000, split: str | None = None) -> dict:
    """R@1/5/10 both ways, medr, meanr, rsum, mR and the counts of `scores`: similarity matrices (averaged into an
    ensemble when several) or one rankings JSONL."""
    if not scores:
        raise VLToolsError("no scores given; pass a sims HDF5, .npy matrix or rankings JSONL")
    if protocol not in PROTOCOLS:
        raise VLToolsError(f"protocol {protocol!r}: choose one of {', '.join(PROTOCOLS)}")
    matrices = [path for path in scores if is_matrix(path)]
    if matrices and len(matrices) != len(scores):
        rankings = next(path for path in scores if not is_matrix(path))
        raise VLToolsError(f"{rankings}: rankings cannot join an ensemble of similarity matrices; give only sims "
                           "HDF5 or .npy files, or one rankings JSONL")
    if matrices:
        parts = [(path, read_matrix(path, captions, split)) for path in scores]
        if len(parts) > 1:
            log.info("ensemble: mean of %d similarity matrices", len(parts))
        result = sims_scores(sims_io.average_sims(parts), scores[0], protocol, fold_size)
    elif len(scores) > 1:
        raise VLToolsError("rankings JSONL are scored one at a time; ensembles need similarity matrices")
    else:
        result = rankings_scores(scores[0], captions, split, protocol)
    return summary(result, protocol, fold_size)


def summary(result: dict, protocol: str, fold_size: int) -> dict:
    """What `score retrieval` reports of a metrics result: recalls and ranks both ways, rsum, mR, the counts and
    the protocol (with its fold size for coco1k)."""
    kept = {key: result[key] for key in ("i2t", "t2i", "rsum", "mR", "n_images", "n_captions")}
    return {**kept, "protocol": protocol, **({"fold_size": fold_size} if protocol == "coco1k" else {})}

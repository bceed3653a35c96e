"""Self-retrieval (Dai & Lin, NeurIPS 2017, section 4.1): can a generated caption find its own image back?

Each generated caption c_t ranks all images I_j by the captioner's log p(c_t | I_j); top-K recall is the
percentage of captions whose own image is within the first K (K = 1, 5, 50, 500 in the paper's Table 1, on
5000 COCO test images). A K at or above the number of images is capped at that number (recall 100%).
Ties are broken against the model, as in vltools.eval.retrieval.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from vltools.errors import input_error
from vltools.eval.retrieval import caption_image_index, rank_summary, text_to_image_ranks
from vltools.io.hdf5 import decode_strings, open_h5, write_arrays

KS = (1, 5, 50, 500)


@dataclass
class LogP:
    """log p(caption | image) for generated captions (rows) and images (columns), with the captions' images."""

    logp: np.ndarray
    image_ids: list[str]
    caption_index: np.ndarray


def write_logp(path: str | os.PathLike | None, logp: np.ndarray, image_ids: list[str],
               caption_image_ids: list[str], caption_ids: list[str] | None = None,
               attrs: dict[str, object] | None = None) -> None:
    """Write a `logp` HDF5 file (`/logp` n_captions x n_images, `/image_ids`, `/caption_image_ids`)."""
    logp = np.asarray(logp)
    if logp.shape != (len(caption_image_ids), len(image_ids)):
        raise ValueError(f"logp shape {logp.shape} != ({len(caption_image_ids)} captions, {len(image_ids)} images)")
    arrays: dict[str, object] = {"logp": logp, "image_ids": list(image_ids),
                                 "caption_image_ids": list(caption_image_ids)}
    if caption_ids is not None:
        arrays["caption_ids"] = list(caption_ids)
    write_arrays(path, "logp", arrays, attrs)


def read_logp(path: str | os.PathLike) -> LogP:
    """Read `/logp`, `/image_ids` and the captions' images (`/caption_image_ids` or `/caption_image_index`)."""
    with open_h5(path) as handle:
        for name in ("logp", "image_ids"):
            if name not in handle:
                raise input_error(path, None, f"no /{name} dataset", "self-retrieval needs /logp (n_captions x "
                                  "n_images), /image_ids and /caption_image_ids")
        logp = handle["logp"][()]
        image_ids = decode_strings(handle["image_ids"][()])
        if "caption_image_ids" in handle:
            index = caption_image_index(image_ids, decode_strings(handle["caption_image_ids"][()]), path,
                                        every_image_captioned=False)
        elif "caption_image_index" in handle:
            index = handle["caption_image_index"][()].astype(np.int64)
            if index.size and (index.min() < 0 or index.max() >= len(image_ids)):
                raise input_error(path, "/caption_image_index", f"values must be image rows 0..{len(image_ids) - 1}")
        else:
            raise input_error(path, None, "no /caption_image_ids (or /caption_image_index) dataset",
                              "say which image each generated caption was generated from")
    if logp.ndim != 2 or logp.shape != (len(index), len(image_ids)):
        raise input_error(path, "/logp", f"shape {logp.shape} does not match {len(index)} captions x "
                          f"{len(image_ids)} images")
    if np.isnan(logp).any():
        raise input_error(path, "/logp", "contains NaN", "check the model that wrote it")
    return LogP(logp, image_ids, index)


def self_retrieval(logp: np.ndarray, caption_index: np.ndarray, ks: tuple[int, ...] = KS) -> dict[str, object]:
    """Top-K recall (percent) of each caption's own image when images are ranked by log p(caption | image).

    `logp[t, j]` = log p(c_t | I_j); `caption_index[t]` = column of the image c_t was generated from.
    Returns `{"R@K": ..., "medr", "meanr", "n_captions", "n_images"}`; K is capped at the number of images.
    """
    logp = np.asarray(logp)
    ranks = text_to_image_ranks(logp.T, np.asarray(caption_index))
    n_images = logp.shape[1]
    summary = rank_summary(ranks, tuple(min(k, n_images) for k in ks))
    recalls = {f"R@{k}": summary[f"R@{min(k, n_images)}"] for k in ks}
    return {**recalls, "medr": summary["medr"], "meanr": summary["meanr"], "n_captions": int(logp.shape[0]),
            "n_images": int(n_images)}

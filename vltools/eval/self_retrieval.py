"""Self-retrieval (Dai & Lin, NeurIPS 2017, section 4.1): can a generated caption find its own image back?

Each generated caption c_t ranks all images I_j by the captioner's log p(c_t | I_j); top-K recall is the
percentage of captions whose own image is within the first K (K = 1, 5, 50, 500 in the paper's Table 1, on
5000 COCO test images). A K at or above the number of images is capped at that number (recall 100%).
Ties are broken against the model, as in vltools.eval.retrieval.
"""

from __future__ import annotations

import numpy as np

from vltools.eval.retrieval import rank_summary, text_to_image_ranks

KS = (1, 5, 50, 500)


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

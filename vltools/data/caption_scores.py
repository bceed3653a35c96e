"""What `vltools score caption` and `vltools.score_caption` compute: the COCO caption metrics of a predictions
file against a references file (captions JSONL, pairs JSONL or COCO JSON), SPICE when it can run; and what
`score self-retrieval` computes from a log-probability file."""

from __future__ import annotations

import os

from vltools.errors import VLToolsError
from vltools.eval.caption import CaptionScores, java_path, pair_predictions, score_captions, spice_missing
from vltools.eval.self_retrieval import self_retrieval
from vltools.io.caption_files import read_caption_file
from vltools.io.logp import read_logp
from vltools.io.progress import log


def score_caption_files(predictions: str | os.PathLike, refs: str | os.PathLike, tokenized: bool = False,
                        spice: bool = True, meteor: bool = True, strict: bool = False) -> tuple[CaptionScores, str]:
    """(the scores, the key of the predictions: image_id or pair_id) of one caption per predicted id against its
    references. SPICE is skipped with a warning when its CoreNLP models are missing; the scores then hold
    "SPICE": None and, under "skipped", the reason (a metric turned off by `spice` or `meteor` False is left out).
    `tokenized`: the references are already PTB-tokenised; `strict`: refuse empty references of predicted ids (see
    `pair_predictions`)."""
    predicted = read_caption_file(predictions)
    references = read_caption_file(refs)
    texts, ref_texts = pair_predictions(predicted, references, strict=strict)
    java_path()
    skipped = {}
    if spice and (reason := spice_missing()):
        log.warning("SPICE skipped: %s", reason)
        skipped["SPICE"], spice = reason, False
    log.info("scoring %d predictions (by %s) against %s (%d references)", len(texts), predicted.key, refs,
             sum(len(r) for r in ref_texts.values()))
    scores = score_captions(texts, ref_texts, tokenized_refs=tokenized, spice=spice, meteor=meteor)
    if skipped:
        scores.metrics.update({**dict.fromkeys(skipped), "skipped": skipped})
    return scores, predicted.key


def score_self_retrieval_file(logp: str | os.PathLike, ks: tuple[int, ...]) -> dict[str, float]:
    """Top-K recall (each K of `ks`, capped at the number of images with a warning), medr and meanr of each
    caption's own image ranked by log p(c | I), from a `caption --logp` file."""
    if not ks or min(ks) < 1:
        raise VLToolsError(f"K values {', '.join(map(str, ks)) or '(none)'}: give positive integers")
    data = read_logp(logp)
    n_images = len(data.image_ids)
    if max(ks) > n_images:
        log.warning("K above the %d images is capped at %d", n_images, n_images)
    return self_retrieval(data.logp, data.caption_index, ks)

"""What `vltools score semantic` and `vltools.score_semantic` compute: NDCG@R, PCC@R and their AUC of a model's
image-to-image similarities (a sims file, i2i rankings or, for the text oracle, a proxy file) against a proxy, and
its agreement with user-study triplets."""

from __future__ import annotations

import os

from vltools.data.semantic import oracle_sims
from vltools.errors import VLToolsError
from vltools.eval import semantic as semantic_eval
from vltools.io import proxy as proxy_io
from vltools.io import sims as sims_io
from vltools.io.hdf5 import hdf5_kind
from vltools.io.progress import log
from vltools.io.records import read_records

PathLike = str | os.PathLike


def score_semantic_file(model: PathLike, proxy: PathLike | None = None, triplets: PathLike | None = None,
                        r_values: tuple[int, ...] = semantic_eval.DEFAULT_R, split: str = "test",
                        queries: int | None = None, plot: PathLike | None = None) -> tuple[dict, list[int]]:
    """(the metrics, the R values kept) of MODEL: NDCG / PCC curves and their AUC against `proxy` (drawn to `plot`
    when given), user agreement with `triplets`, or both. MODEL is a sims HDF5 file (rows: query image ids,
    columns: database image ids), an i2i rankings JSONL (its database: every image of the proxy), or a proxy file
    whose similarities rank the first `queries` images of `split` against the split (the text oracle)."""
    if proxy is None and triplets is None:
        raise VLToolsError("give a proxy for NDCG / PCC, user-study triplets for user agreement, or both")
    if plot is not None and proxy is None:
        raise VLToolsError("the NDCG / PCC curves need a proxy")
    r_values = semantic_eval.check_r_values(list(r_values))
    kind = hdf5_kind(model)
    sims = None
    if kind == "proxy":
        sims = oracle_sims(proxy_io.read_proxy_file(model), split, queries)
    elif kind is not None:
        sims = sims_io.read_sims(model)
    rankings = read_records(model, "rankings") if sims is None else None
    result: dict[str, object] = {}
    kept: list[int] = []
    if proxy is not None:
        tfidf = proxy_io.read_proxy(proxy)
        if sims is not None:
            ndcg, pcc, kept = semantic_eval.semantic_from_sims(sims, tfidf, r_values, model)
        else:
            ndcg, pcc, kept = semantic_eval.semantic_from_rankings(rankings, tfidf, r_values, model)
        result.update(semantic_eval.summarize_curves(ndcg, pcc, kept))
        if plot is not None:
            semantic_eval.plot_curves(plot, result)
    if triplets is not None:
        annotated = proxy_io.read_triplets(triplets)
        if sims is not None:
            sim_a, sim_b = semantic_eval.triplet_sims_from_matrix(sims, annotated, model)
        else:
            sim_a, sim_b = semantic_eval.triplet_sims_from_rankings(rankings, annotated, model)
        agreement, used = semantic_eval.user_agreement(sim_a, sim_b, semantic_eval.triplet_counts(annotated))
        if used < len(annotated):
            log.info("%d triplets without any annotator left out", len(annotated) - used)
        result.update({"user_agreement": agreement, "n_triplets": used})
    return result, kept

"""Semantic image retrieval metrics of Gordo & Larlus (CVPR 2017): NDCG@R, PCC@R, their AUC, user agreement.

Definitions (the paper names the measures; the details it leaves open are fixed here):
- relevance of a database image d to a query q = dot product of their l2-normalised tf-idf vectors (proxy file);
  the query itself is removed from its ranking;
- NDCG@R = DCG@R / IDCG@R with DCG@R = sum_{i=1..R} rel_i / log2(i + 1) over the model's top R (linear gain,
  since relevances are graded in [0, 1]) and IDCG@R the same over the R most relevant database images;
  a query with no relevant image at all (IDCG = 0) is left out of the mean;
- PCC@R = Pearson correlation between the model's scores and the relevances of its top R results, per query,
  averaged over queries; it is undefined (left out) for R = 1 and where either list is constant;
- AUC = area under the curve of the mean values against R on a log axis normalised to [0, 1] (trapezoids over
  the R values given; R values are spread geometrically, 1, 2, 5, 10, ..., so a log axis weighs them evenly);
  a curve of all ones has AUC 1 (the text oracle's 100 in Table 2);
- model ties are broken in database order.
All values reported in percent, as in the paper's Table 2.

User agreement (section 3): a triplet (query, a, b) has o1 annotators who chose a, o2 who chose b and o3 who
chose neither. The model chooses the image with the higher similarity to the query and scores
w * o_i / (o1 + o2) with w = (o1 + o2) / (o1 + o2 + o3), i.e. o_i / (o1 + o2 + o3); a tie scores half of w.
The agreement is the mean over every triplet with at least one annotator (o1 + o2 + o3 > 0), as the paper averages
"through all the triplets with at least one human annotator": a triplet where every annotator chose neither has
w = 0 and counts as 0.
"""

from __future__ import annotations

import itertools
import os
from typing import TYPE_CHECKING

import numpy as np

from vltools.errors import VLToolsError, argument, input_error, shown_ids
from vltools.io.output import written
from vltools.io.progress import log
from vltools.text.sparse import relevance

if TYPE_CHECKING:    # types only: `vltools score --help` reads DEFAULT_R without loading scipy and h5py
    from vltools.io.proxy import Proxy
    from vltools.io.sims import Sims

DEFAULT_R = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
COUNT_FIELDS = ("o1", "o2", "o3")


def ranking_curves(top_scores: np.ndarray, top_relevance: np.ndarray, ideal_relevance: np.ndarray,
                   r_values: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per-query NDCG@R and PCC@R (queries x len(r_values), NaN where undefined).

    Each row of `top_scores` / `top_relevance` is a query's results in the model's order (scores descending),
    and each row of `ideal_relevance` the database relevances sorted descending; all at least max(R) long.
    """
    longest = max(r_values)
    if min(top_scores.shape[1], ideal_relevance.shape[1]) < longest:
        raise ValueError(f"R = {longest} needs at least {longest} results per query")
    discount = 1.0 / np.log2(np.arange(2, longest + 2))
    dcg = np.cumsum(top_relevance[:, :longest] * discount, axis=1)
    idcg = np.cumsum(ideal_relevance[:, :longest] * discount, axis=1)
    ndcg = np.full((top_scores.shape[0], len(r_values)), np.nan)
    pcc = np.full_like(ndcg, np.nan)
    for column, r in enumerate(r_values):
        has_relevant = idcg[:, r - 1] > 0
        ndcg[has_relevant, column] = dcg[has_relevant, r - 1] / idcg[has_relevant, r - 1]
        x = top_scores[:, :r].astype(np.float64)
        y = top_relevance[:, :r].astype(np.float64)
        defined = (np.ptp(x, axis=1) > 0) & (np.ptp(y, axis=1) > 0) if r > 1 else np.zeros(len(x), dtype=bool)
        xc = x[defined] - x[defined].mean(axis=1, keepdims=True)
        yc = y[defined] - y[defined].mean(axis=1, keepdims=True)
        pcc[defined, column] = (xc * yc).sum(1) / np.sqrt((xc * xc).sum(1) * (yc * yc).sum(1))
    return ndcg, pcc


def curves_from_scores(scores: np.ndarray, relevance: np.ndarray, query_column: np.ndarray,
                       r_values: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """NDCG@R and PCC@R for full queries x database score and relevance matrices.

    `query_column[q]` is the database column of query q itself (removed from its ranking), or -1.
    """
    longest = max(r_values)
    rows = np.arange(scores.shape[0])
    scores = np.array(scores, dtype=np.float64)
    ideal = np.array(relevance, dtype=np.float64)
    inside = query_column >= 0
    scores[rows[inside], query_column[inside]] = -np.inf
    ideal[rows[inside], query_column[inside]] = -np.inf
    order = np.argsort(-scores, axis=1, kind="stable")[:, :longest]
    top_scores = np.take_along_axis(scores, order, axis=1)
    top_relevance = np.take_along_axis(relevance, order, axis=1)
    ideal = -np.sort(-ideal, axis=1)[:, :longest]
    return ranking_curves(top_scores, top_relevance, ideal, r_values)


def curve_auc(r_values: list[int], values: list[float | None]) -> float | None:
    """Area under a curve of values against R on a log axis normalised to [0, 1]; undefined points skipped."""
    points = [(np.log(r), v) for r, v in zip(r_values, values, strict=True) if v is not None]
    if not points:
        return None
    if len(points) == 1:
        return float(points[0][1])
    x = np.array([p[0] for p in points])
    y = np.array([p[1] for p in points])
    x = (x - x[0]) / (x[-1] - x[0])
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2))


def summarize_curves(ndcg: np.ndarray, pcc: np.ndarray, r_values: list[int]) -> dict[str, object]:
    """Mean NDCG@R and PCC@R over the queries where defined, and their AUC, in percent."""
    def means(values: np.ndarray) -> list[float | None]:
        counts = np.isfinite(values).sum(axis=0)
        totals = np.nansum(values, axis=0)
        return [float(100.0 * t / c) if c else None for t, c in zip(totals, counts, strict=True)]

    ndcg_mean, pcc_mean = means(ndcg), means(pcc)
    return {"R": list(r_values),
            "ndcg": {str(r): v for r, v in zip(r_values, ndcg_mean, strict=True)},
            "pcc": {str(r): v for r, v in zip(r_values, pcc_mean, strict=True)},
            "ndcg_auc": curve_auc(r_values, ndcg_mean), "pcc_auc": curve_auc(r_values, pcc_mean),
            "n_queries": int(ndcg.shape[0]),
            "n_queries_without_relevant": int((~np.isfinite(ndcg[:, -1])).sum()) if ndcg.size else 0}


def user_agreement(sim_a: np.ndarray, sim_b: np.ndarray, counts: np.ndarray) -> tuple[float | None, int]:
    """Agreement (percent) of a model's choices with annotators, and the number of triplets it averages (those with
    at least one annotator; all-"neither" triplets score 0).

    `sim_a[t]`, `sim_b[t]`: the model's similarity of triplet t's query to a and to b; `counts[t]` = (o1, o2, o3).
    """
    counts = np.asarray(counts, dtype=np.float64)
    sim_a, sim_b = np.asarray(sim_a, dtype=np.float64), np.asarray(sim_b, dtype=np.float64)
    decided = counts[:, 0] + counts[:, 1]
    annotators = counts.sum(axis=1)
    used = annotators > 0
    if not used.any():
        return None, 0
    chosen = np.where(sim_a > sim_b, counts[:, 0], np.where(sim_b > sim_a, counts[:, 1], decided / 2))
    scores = chosen[used] / annotators[used]
    return float(100.0 * scores.mean()), int(used.sum())


def plot_curves(path: str | os.PathLike, summary: dict[str, object]) -> None:
    """Draw the NDCG@R and PCC@R curves (log R axis) of a summary to a PNG file, atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for axis, name, label in ((axes[0], "ndcg", "NDCG@R"), (axes[1], "pcc", "PCC@R")):
        points = [(r, v) for r, v in zip(summary["R"], summary[name].values(), strict=True) if v is not None]
        if points:
            axis.plot([p[0] for p in points], [p[1] for p in points], marker="o")
        axis.set_xscale("log")
        axis.set_xlabel("R (retrieved images)")
        axis.set_ylabel(f"{label} (%)")
        auc = summary[f"{name}_auc"]
        axis.set_title(f"{label}, AUC {auc:.1f}" if auc is not None else label)
        axis.grid(True, alpha=0.3)
    figure.tight_layout()
    try:
        with written(path) as tmp:
            figure.savefig(tmp, format="png", dpi=100)
    finally:
        plt.close(figure)


def check_r_values(r_values: list[int]) -> list[int]:
    """R values must be positive and increasing."""
    if not r_values or any(r < 1 for r in r_values) or any(b <= a for a, b in itertools.pairwise(r_values)):
        raise VLToolsError(f"{argument('r_values')} {','.join(map(str, r_values))}: give increasing positive integers, "
                           "e.g. 1,10,100")
    return r_values


def _usable_r(r_values: list[int], available: int, what: str) -> list[int]:
    kept = [r for r in r_values if r <= available]
    if len(kept) < len(r_values):
        log.warning("R = %s left out: only %d %s", ",".join(str(r) for r in r_values if r > available),
                    available, what)
    if not kept:
        raise VLToolsError(f"no R value is at most {available} ({what}); give smaller {argument('r_values')}")
    return kept


def semantic_from_sims(sims: Sims, proxy: Proxy, r_values: list[int], source: object,
                       block: int = 256) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """NDCG@R and PCC@R of a queries x database similarity matrix (rows `image_ids`, columns `caption_ids`)."""
    query_rows = proxy.rows(sims.image_ids, source, "query ids (/image_ids)")
    database_rows = proxy.rows(sims.caption_ids, source, "database ids (/caption_ids)")
    column = {item: j for j, item in enumerate(sims.caption_ids)}
    query_column = np.array([column.get(q, -1) for q in sims.image_ids], dtype=np.int64)
    kept = _usable_r(r_values, len(sims.caption_ids) - int((query_column >= 0).any()), "database images per query")
    ndcg, pcc = [], []
    for start in range(0, len(query_rows), block):
        part = slice(start, start + block)
        curves = curves_from_scores(sims.sims[part], relevance(proxy, query_rows[part], database_rows),
                                    query_column[part], kept)
        ndcg.append(curves[0])
        pcc.append(curves[1])
    return np.concatenate(ndcg), np.concatenate(pcc), kept


def semantic_from_rankings(rankings: list[dict], proxy: Proxy, r_values: list[int],
                           source: object) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """NDCG@R and PCC@R of i2i rankings (top-k lists); the database is every proxy image but the query."""
    wrong = [r["query"] for r in rankings if r["direction"] != "i2i"]
    if wrong:
        raise input_error(source, f"query {wrong[0]!r}", "semantic retrieval needs direction 'i2i' rankings",
                          "rank images by images with match on two image embedding files")
    lists = [[(i, s) for i, s in zip(r["ids"], r["scores"], strict=True) if i != r["query"]] for r in rankings]
    kept = _usable_r(r_values, min(min(len(items) for items in lists), len(proxy.ids) - 1),
                     "results in the shortest ranking list (or proxy images)")
    longest = max(kept)
    query_rows = proxy.rows([r["query"] for r in rankings], source, "queries")
    block = max(1, (1 << 23) // len(proxy.ids))  # queries x all proxy images relevances: at most 64 MB a block
    ndcg, pcc = [], []
    for start in range(0, len(rankings), block):
        rows = query_rows[start:start + block]
        relevant = relevance(proxy, rows, np.arange(len(proxy.ids)))
        relevant[np.arange(len(rows)), rows] = -np.inf
        ideal = -np.sort(-relevant, axis=1)[:, :longest]
        top_scores = np.zeros((len(rows), longest))
        top_relevance = np.zeros((len(rows), longest))
        for k, items in enumerate(lists[start:start + block]):
            query = rankings[start + k]["query"]
            listed = proxy.rows([i for i, _ in items[:longest]], source, f"ids ranked for {query!r}")
            top_scores[k] = [s for _, s in items[:longest]]
            top_relevance[k] = relevant[k, listed]
        curves = ranking_curves(top_scores, top_relevance, ideal, kept)
        ndcg.append(curves[0])
        pcc.append(curves[1])
    return np.concatenate(ndcg), np.concatenate(pcc), kept


def triplet_sims_from_matrix(sims: Sims, triplets: list[dict], source: object) -> tuple[np.ndarray, np.ndarray]:
    """The model's similarity of each triplet's query (a row) to its images a and b (columns)."""
    row = {item: i for i, item in enumerate(sims.image_ids)}
    column = {item: j for j, item in enumerate(sims.caption_ids)}
    missing = sorted({t["query"] for t in triplets if t["query"] not in row}
                     | {t[k] for t in triplets for k in ("a", "b") if t[k] not in column})
    if missing:
        raise input_error(source, None, f"{len(missing)} triplet images have no similarity: {shown_ids(missing)}",
                          "queries must be rows (/image_ids) and compared images columns (/caption_ids)")
    rows = np.array([row[t["query"]] for t in triplets])
    return (sims.sims[rows, [column[t["a"]] for t in triplets]],
            sims.sims[rows, [column[t["b"]] for t in triplets]])


def triplet_sims_from_rankings(rankings: list[dict], triplets: list[dict],
                               source: object) -> tuple[np.ndarray, np.ndarray]:
    """The model's similarity of each triplet's query to a and b, read from the query's ranking list."""
    listed = {r["query"]: dict(zip(r["ids"], r["scores"], strict=True)) for r in rankings}
    missing = sorted({f"{t['query']}->{t[k]}" for t in triplets for k in ("a", "b")
                      if t[k] not in listed.get(t["query"], {})})
    if missing:
        raise input_error(source, None, f"{len(missing)} triplet pairs are not ranked: {shown_ids(missing)}",
                          "rank the triplet images for each query (a longer top-k or a sims file)")
    return (np.array([listed[t["query"]][t["a"]] for t in triplets]),
            np.array([listed[t["query"]][t["b"]] for t in triplets]))


def triplet_counts(triplets: list[dict]) -> np.ndarray:
    """(o1, o2, o3) of each triplet."""
    return np.array([[t[k] for k in COUNT_FIELDS] for t in triplets], dtype=np.int64).reshape(-1, 3)

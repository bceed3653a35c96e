"""Print Gordo & Larlus's Table 2 (and Table 1 when a user study is given) from `vltools score semantic` JSON files,
and draw Figure 2 (NDCG@R and PCC@R of every row).

Usage: python table.py TITLE oracle=J baseline=J wsabie=J v=J vt=J vtt=J [objects=J meteor=J word2vec=J generated=J]
       --proxy PROXY.h5 [--split S] [--first N] [--triplets USER_STUDY.jsonl] [--figure FIG.png]
       [--generated GENERATED.jsonl --captioner CAPTIONER.pt]
With --triplets, Table 1 needs the four proxy rows (objects, meteor, word2vec, generated: `score semantic` JSON with
user_agreement). A row named several times (word2vec=J once per seed) prints the mean and standard deviation of its
files, and its label says how many. The generated-captions row ends with the number of distinct captions in
--generated (written by --captioner; vltools.reporting.tables): one caption for half of the images or more prints as
COLLAPSED, with a note naming the captioner. The Random row is measured here: five rankings by uniformly random scores
(seeds 0-4) of the same queries and database, scored by vltools' own functions; mean and standard deviation. A last
line says how --proxy (the caption tf-idf) counted each image's words. Direction lines say whether the human
captions' tf-idf agrees with the users more than R-MAC (Table 1) and the learned (V, V) embedding's NDCG AUC is above
R-MAC's (Table 2), as the paper has them, with the margin against the noise: the larger standard deviation of the two
rows when either is given once per seed, else what one test item can move the mean (user agreement: 100 / n_triplets
points; NDCG AUC: 100 / n_queries, each query scoring 0-1), and the test size; a margin under it is "within noise".
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from vltools.data.semantic import oracle_sims
from vltools.eval import semantic
from vltools.io import proxy as proxy_io
from vltools.io.proxy import proxy_words, read_proxy_file
from vltools.io.sims import Sims
from vltools.reporting.tables import HEAD, WIDTH, SpreadColumn, against_noise

ROWS = (("oracle", "Text oracle: caption tf-idf"), ("random", "Random (x5)"), ("baseline", "Visual baseline (V, V)"),
        ("wsabie", "WSABIE (V+T, V)"), ("v", "Proposed (V, V)"), ("vt", "Proposed (V+T, V)"),
        ("vtt", "Proposed (V+T, V+T)"))
# the paper's Table 2 on Visual Genome: US, NDCG AUC, PCC AUC
PAPER = {"oracle": (76.3, 100, 100), "random": (50.0, 10.2, -0.2), "baseline": (64.0, 58.4, 16.1),
         "wsabie": (67.8, 61.0, 15.7), "v": (76.9, 70.1, 20.7), "vt": (77.2, 68.8, 21.1), "vtt": (78.6, 74.4, 22.5)}
# how a caption proxy counted each image's words (its `words` attribute), as the table says it
WORD_COUNTS = {"distinct": "once (its captions' words as a single set, as in the paper)",
               "occurrences": "once per occurrence"}
# Table 1 below the annotators, in the paper's order: row, label, the paper's agreement
TABLE1 = (("baseline", "Visual baseline: R-MAC", "64.0"), ("objects", "Object annotations: tf-idf", "63.4"),
          ("meteor", "Human captions: METEOR", "72.1"), ("word2vec", "Human captions: word2vec + FV", "70.1"),
          ("oracle", "Human captions: tf-idf", "76.3"), ("generated", "Generated captions: tf-idf", "62.5"),
          ("random", "Random (x5)", "50.0 +- 0.8"))


def random_rows(proxy_path: str, split: str, first: int | None, triplets: str | None) -> list[dict]:
    """Scores of five random rankings of the split's queries against the split."""
    proxy = read_proxy_file(proxy_path)
    shape = oracle_sims(proxy, split, first)
    scoring = proxy_io.read_proxy(proxy_path)
    annotated = proxy_io.read_triplets(triplets) if triplets else None
    results = []
    for seed in range(5):
        noise = np.random.default_rng(seed).random(shape.sims.shape).astype(np.float32)
        sims = Sims(noise, shape.image_ids, shape.caption_ids, None)
        ndcg, pcc, kept = semantic.semantic_from_sims(sims, scoring, list(semantic.DEFAULT_R), proxy_path)
        result = semantic.summarize_curves(ndcg, pcc, kept)
        if annotated is not None:
            sim_a, sim_b = semantic.triplet_sims_from_matrix(sims, annotated, "random")
            result["user_agreement"] = semantic.user_agreement(sim_a, sim_b, semantic.triplet_counts(annotated))[0]
        results.append(result)
    return results


def annotator_agreement(triplets: str) -> tuple[float, int]:
    """Leave-one-out agreement of the simulated annotators (section 3), over every decision whose triplet has
    another deciding annotator: s = w (o_i - 1) / (o1 + o2 - 1), w = (o1 + o2 - 1) / (o1 + o2 + o3 - 1)."""
    scores = []
    for o1, o2, o3 in semantic.triplet_counts(proxy_io.read_triplets(triplets)):
        decided = o1 + o2
        for chosen, count in ((o1, o1), (o2, o2)):
            if decided - 1 > 0:
                scores += [100 * (chosen - 1) / (decided + o3 - 1)] * count
    return float(np.mean(scores)), len(scores)


def repeated(label: str, rows: list[dict]) -> str:
    """A row's label, with how many files it averages when several ("(x5)"; the Random row says it itself)."""
    return f"{label} (x{len(rows)})" if len(rows) > 1 and "(x" not in label else label


def cell(values: list[float | None], digits: int = 1) -> str:
    present = [v for v in values if v is not None]
    if not present:
        return "-"
    if len(values) == 1:
        return f"{present[0]:.{digits}f}"
    return f"{np.mean(present):.{digits}f} +- {np.std(present):.{digits}f}"


def directions(results: dict[str, list[dict]]) -> list[str]:
    """The paper's claims read off the tables: the human captions' tf-idf agrees with the users more than R-MAC does
    (Table 1), and the learned embedding (V, V) ranks closer to the captions' tf-idf than R-MAC (Table 2, NDCG AUC);
    each margin against the seeds' spread (rows given once per seed) or one test item's worth, with the test size."""
    def values(name: str, key: str) -> list[float]:
        return [r[key] for r in results.get(name, []) if r.get(key) is not None]

    claims = (("Table 1", "user agreement", "user_agreement", "oracle", "Human captions: tf-idf", "n_triplets",
               "triplet"),
              ("Table 2", "NDCG AUC", "ndcg_auc", "v", "Proposed (V, V)", "n_queries", "query"))
    lines = []
    for table, what, key, name, label, count, item in claims:
        ours, baseline = values(name, key), values("baseline", key)
        if not ours or not baseline:
            continue
        margin = float(np.mean(ours)) - float(np.mean(baseline))
        verdict = f"above R-MAC, as the paper's {table}" if margin > 0 else "NOT above R-MAC here"
        line = (f"direction ({table}, {what}): {label} {np.mean(ours):.1f} against R-MAC {np.mean(baseline):.1f}: "
                f"{verdict}")
        sizes = [r[count] for r in results.get(name, []) + results.get("baseline", []) if r.get(count)]
        size = f" (test: {max(sizes)} {'queries' if item == 'query' else item + 's'})" if sizes else ""
        if len(ours) > 1 or len(baseline) > 1:
            spread = max(float(np.std(ours)), float(np.std(baseline)))
            band = f"the seeds' spread, std {spread:.1f}"
            line += f"; {against_noise(margin, spread, band)}{size}"
        elif sizes:
            unit = 100 / max(sizes)
            line += f"; {against_noise(margin, unit, f'one test {item} = {unit:.1f} points')}{size}"
        else:
            line += "; test size not recorded, so no noise band"
        lines.append(line)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("title")
    parser.add_argument("rows", nargs="+", help="NAME=score.json")
    parser.add_argument("--proxy", required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--first", type=int)
    parser.add_argument("--triplets")
    parser.add_argument("--figure")
    parser.add_argument("--generated", help="the generated captions of the generated-captions row")
    parser.add_argument("--captioner", help="the model that wrote --generated")
    args = parser.parse_args()
    results: dict[str, list[dict]] = {}
    for item in args.rows:
        name, path = item.split("=", 1)
        with open(path, encoding="utf-8") as stream:
            results.setdefault(name, []).append(json.load(stream))
    missing = [name for name, _, _ in TABLE1 if name != "random" and name not in results]
    if args.triplets and missing:
        parser.error(f"--triplets: Table 1 needs the rows {', '.join(missing)} (NAME=score.json)")
    results["random"] = random_rows(args.proxy, args.split, args.first, args.triplets)
    print(args.title)
    print(f"{'Method':<30}{'US':>14}{'NDCG AUC':>14}{'PCC AUC':>14}    paper (Visual Genome): US / NDCG / PCC")
    for name, label in ROWS:
        if name not in results:
            continue
        rows = results[name]
        us = cell([r.get("user_agreement") for r in rows])
        ndcg, pcc = cell([r["ndcg_auc"] for r in rows]), cell([r["pcc_auc"] for r in rows])
        print(f"{label:<30}{us:>14}{ndcg:>14}{pcc:>14}    {' / '.join(str(v) for v in PAPER[name])}")
    if args.triplets:
        print("\nTable 1: agreement with the (simulated) users, percent")
        agreement, decisions = annotator_agreement(args.triplets)
        column = SpreadColumn()
        lines = [("Annotators (leave one out)", f"{agreement:.1f}", "89.1 +- 4.6", column.cell("annotators", None))]
        lines += [(repeated(label, results[name]), cell([r.get("user_agreement") for r in results[name]]), paper,
                   column.cell(label, args.generated if name == "generated" else None, args.captioner))
                  for name, label, paper in TABLE1]
        print(f"{'Method':<36}{'score':>18}    {'paper':<14}{HEAD:>{WIDTH}}")
        for label, value, paper, spread in lines:
            print(f"{label:<36}{value:>18}    {paper:<14}{spread}".rstrip())
        for note in column.notes():
            print(note)
    for line in directions(results):
        print(line)
    print(f"\nCaption tf-idf (--proxy): each image's words counted {WORD_COUNTS[proxy_words(args.proxy)]}")
    if args.figure:
        draw(args.figure, results)
        print(f"\nFigure 2: {args.figure}")


def draw(path: str, results: dict[str, list[dict]]) -> None:
    """NDCG@R and PCC@R against R (log axis) for every row; the random row is its first run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name, label in ROWS:
        if name not in results:
            continue
        summary = results[name][0]
        for axis, key in ((axes[0], "ndcg"), (axes[1], "pcc")):
            points = [(int(r), v) for r, v in summary[key].items() if v is not None]
            axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    for axis, key in ((axes[0], "NDCG@R (%)"), (axes[1], "PCC@R (%)")):
        axis.set_xscale("log")
        axis.set_xlabel("R (retrieved images)")
        axis.set_ylabel(key)
        axis.grid(True, alpha=0.3)
    axes[1].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


if __name__ == "__main__":
    main()

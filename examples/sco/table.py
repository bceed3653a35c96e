"""Print SCO's Table 2 layout (R@1/5/10 of image annotation and image retrieval, and mR) and Table 3 (lambda).

Usage: python table.py TITLE [--paper=f30k|coco1k] [--sentences=GENERATED.jsonl --captioner=CAPTIONER.pt]
                      ROW=scores.json ... lambda=L=scores.json ...
Each file is `vltools score retrieval` JSON; mR is its "mR" when present, else the mean of the six recalls (the
paper's definition). The chance row is exact for a uniformly random ranking of the first file's test set: an
image has c = n_captions / n_images captions, so i2t R@K = 1 - C(n_captions - c, K) / C(n_captions, K), and a
caption has one image: t2i R@K = K / n_images (per 1000-image fold under the coco1k protocol).
The "ctx + sen" rows, whose image side is the captioner's generated sentences (--sentences, written by
--captioner), end with their number of distinct sentences (vltools.reporting.tables): one sentence for half of the
images or more prints as COLLAPSED, with a note after the table naming the captioner. "ctx + sen" (ctx_sen) is the
paper's reading, the sentence alone; "ctx + sen (sum)" (ctx_sen_sum) is vltools' variant with the context summed in;
a note after the table says which were printed. A direction line says whether the concept + context rows are above
the context alone (mR), as the paper's Table 2 has it, with the smallest margin against what one test image is worth
(100 / n_images points of an image-annotation recall, a sixth of that in mR; the ctx row's file gives the test size):
a margin under one image is "within noise".
"""

from __future__ import annotations

import json
import sys
from math import comb

from vltools.reporting.tables import HEAD, WIDTH, SpreadColumn, against_noise

KS = (1, 5, 10)
# the rows whose images are generated sentences, and what represents an image in each
SENTENCE_ROWS = {"ctx_sen": "the generated sentence alone (section 4.2, the paper's reading)",
                 "ctx_sen_sum": "the generated sentence summed with the context (vltools' variant)"}
FOLD = 1000
NAMES = {"ctx_1crop": "ctx (1-crop)", "ctx": "ctx", "ctx_sen": "ctx + sen", "ctx_sen_sum": "ctx + sen (sum)",
         "ctx_gen_S": "ctx + gen (S)", "ctx_gen_E": "ctx + gen (E)", "ctx_gen": "ctx + gen", "cnp": "cnp",
         "cnp_gen": "cnp + gen", "cnp_ctx_C": "cnp + ctx (C)", "cnp_ctx": "cnp + ctx", "cnp_ctx_gen": "cnp + ctx + gen"}
# SCO paper, Table 2 (Flickr30K, MSCOCO 1K): annotation R@1/5/10, retrieval R@1/5/10
PAPER = {
    "f30k": {"ctx": (33.8, 63.7, 75.9, 26.3, 55.4, 67.6), "ctx + sen": (22.8, 48.6, 60.8, 19.1, 46.0, 59.7),
             "cnp": (30.9, 60.9, 72.4, 23.1, 52.5, 64.8),
             "cnp + ctx": (42.4, 72.9, 81.5, 32.4, 63.5, 73.9),
             "cnp + ctx + gen": (44.2, 74.1, 83.6, 32.8, 64.3, 74.9)},
    "coco1k": {"ctx": (44.7, 78.2, 88.3, 37.0, 73.2, 85.7), "ctx + sen": (39.2, 73.3, 85.5, 32.4, 70.1, 83.7),
               "cnp": (59.5, 86.9, 93.6, 48.5, 81.4, 90.9),
               "cnp + ctx": (65.3, 90.0, 96.0, 54.2, 85.9, 93.5),
               "cnp + ctx + gen": (66.4, 91.3, 96.6, 55.5, 86.5, 93.7)},
}


def chance(n_images: int, n_captions: int) -> tuple[float, ...]:
    """Expected recalls (percent) of a uniformly random ranking."""
    per_image = n_captions // n_images
    i2t = [100 * (1 - comb(n_captions - per_image, k) / comb(n_captions, k)) for k in KS]
    t2i = [100 * min(k, n_images) / n_images for k in KS]
    return (*i2t, *t2i)


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as stream:
        return json.load(stream)


def recalls(result: dict) -> tuple[float, ...]:
    return tuple(result[d][f"R@{k}"] for d in ("i2t", "t2i") for k in KS)


def mean_recall(result: dict) -> float:
    return float(result["mR"]) if "mR" in result else sum(recalls(result)) / 6


def chance_of(result: dict) -> tuple[float, ...]:
    images, captions = result["n_images"], result["n_captions"]
    if result.get("protocol") == "coco1k":
        images, captions = FOLD, captions * FOLD // images
    return chance(images, captions)


def line(name: str, values: tuple[float, ...], mr: float, spread: str = "") -> str:
    cells = " ".join(f"{v:6.1f}" for v in values)
    return f"{name:<18}{cells[:20]}   {cells[21:]}   {mr:6.1f}{' ' + spread if spread.strip() else ''}"


def header(first: str, spread: bool = False) -> list[str]:
    return [f"{'':<18}{'Image Annotation':<23}{'Image Retrieval':<23}",
            f"{first:<18}{'R@1':>6} {'R@5':>6} {'R@10':>6}   {'R@1':>6} {'R@5':>6} {'R@10':>6}   {'mR':>6}"
            + (f" {HEAD:>{WIDTH}}" if spread else "")]


def direction(rows: list[tuple[str, dict]]) -> str | None:
    """The paper's claim read off the table: the concept + context rows above the context alone (mR), the smallest
    margin against one test image's worth and the test size; None when the context row or both concept + context
    rows are missing."""
    mr = {name: mean_recall(result) for name, result in rows}
    combined = [name for name in ("cnp_ctx", "cnp_ctx_gen") if name in mr]
    if "ctx" not in mr or not combined:
        return None
    above = all(mr[name] > mr["ctx"] for name in combined)
    line = (f"direction: mR of ctx {mr['ctx']:.1f} against " + ", ".join(f"{NAMES[n]} {mr[n]:.1f}" for n in combined)
            + ": " + ("concepts and context above the context alone, as the paper's Table 2" if above
                      else "NOT above the context alone here"))
    sizes = dict(rows)["ctx"]
    if not sizes.get("n_images"):
        return line + "; test size not recorded, so no noise band"
    unit = 100 / sizes["n_images"] / 6
    margin = min(mr[name] - mr["ctx"] for name in combined)
    captions = f", {sizes['n_captions']} captions" if sizes.get("n_captions") else ""
    return (line + f"; {against_noise(margin, unit, f'one test image = {unit:.2f} mR points')} (test split: "
            + f"{sizes['n_images']} images{captions})")


def main(argv: list[str]) -> None:
    title, paper, rows, lambdas, sentences, captioner = argv[0], None, [], [], None, None
    for arg in argv[1:]:
        if arg.startswith("--paper="):
            paper = arg.split("=", 1)[1]
        elif arg.startswith("--sentences="):
            sentences = arg.split("=", 1)[1]
        elif arg.startswith("--captioner="):
            captioner = arg.split("=", 1)[1]
        elif arg.startswith("lambda="):
            value, path = arg[len("lambda="):].split("=", 1)
            lambdas.append((value, load(path)))
        else:
            name, path = arg.split("=", 1)
            rows.append((name, load(path)))
    column = SpreadColumn()
    print(title)
    print("\n".join(header("Method", spread=sentences is not None)))
    if rows:
        base = chance_of(rows[0][1])
        print(line("chance", base, sum(base) / 6))
    for name, result in rows:
        label = NAMES.get(name, name)
        spread = column.cell(label, sentences if name in SENTENCE_ROWS else None, captioner)
        print(line(label, recalls(result), mean_recall(result), spread))
    if paper:
        print(f"paper ({paper}):")
        for name, values in PAPER[paper].items():
            print(line(f"  {name}", values, sum(values) / 6))
    verdict = direction(rows)
    if verdict:
        print(verdict)
    if lambdas:
        print("\nTable 3 layout: cnp + ctx + gen with L = L_mat + lambda L_gen")
        print("\n".join(header("lambda")))
        for value, result in lambdas:
            print(line(value, recalls(result), mean_recall(result)))
    notes = [f"{NAMES[name]}: each image is {SENTENCE_ROWS[name]}" for name, _ in rows if name in SENTENCE_ROWS]
    notes += column.notes()
    if notes:
        print("\n" + "\n".join(notes))


if __name__ == "__main__":
    main(sys.argv[1:])

"""Print SGRAF's Table 1 layout (R@1/5/10 both directions, rSum) from `vltools score retrieval` JSON files.

Usage: python table.py TITLE chance=SCORES.json SAF=saf.json SGR=sgr.json SGRAF=sgraf.json [--paper=f30k|coco1k]
The chance row is exact for a uniformly random ranking of the image and caption counts in SCORES.json (one
fold, of `fold_size` images, under the coco1k protocol): an image has c = n_captions / n_images captions, so
i2t R@K = 1 - C(n_captions - c, K) / C(n_captions, K); a caption has one image: t2i R@K = K / n_images.
A direction line says whether the ensemble's rSum is at least each member's, as the paper's Table 1 has it, with
the margin (the ensemble's rSum less the better member's) against what one test image is worth (100 / n_images
points of an image-to-caption recall, the mean over the folds included) and the test size, both read from the
chance row's file: a margin under one image is "within noise".
"""

from __future__ import annotations

import json
import sys
from math import comb

from vltools.reporting.tables import against_noise

KS = (1, 5, 10)
# SGRAF paper, Table 1 (sentence retrieval R@1/5/10, image retrieval R@1/5/10)
PAPER = {
    "f30k": {"SAF": (73.7, 93.3, 96.3, 56.1, 81.5, 88.0), "SGR": (75.2, 93.3, 96.6, 56.2, 81.0, 86.5),
             "SGRAF": (77.8, 94.1, 97.4, 58.5, 83.0, 88.8)},
    "coco1k": {"SAF": (76.1, 95.4, 98.3, 61.8, 89.4, 95.3), "SGR": (78.0, 95.8, 98.2, 61.4, 89.3, 95.4),
               "SGRAF": (79.6, 96.2, 98.5, 63.2, 90.7, 96.1)},
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


def recalls(path: str) -> tuple[float, ...]:
    """The six recalls of a score retrieval JSON file."""
    result = load(path)
    return tuple(result[d][f"R@{k}"] for d in ("i2t", "t2i") for k in KS)


def chance_of(path: str) -> tuple[float, ...]:
    """Chance recalls for the sizes scored in a score retrieval JSON file (per fold for coco1k)."""
    result = load(path)
    images, captions = result["n_images"], result["n_captions"]
    if result.get("protocol") == "coco1k":
        fold = result.get("fold_size", 1000)
        images, captions = fold, captions * fold // images
    return chance(images, captions)


def row(name: str, values: tuple[float, ...]) -> str:
    cells = " ".join(f"{v:6.1f}" for v in values)
    return f"{name:<14}{cells[:20]}   {cells[21:]}   {sum(values):7.1f}"


def direction(rows: list[tuple[str, tuple[float, ...]]], sizes: dict | None = None) -> str | None:
    """The paper's claim read off the table: the ensemble's rSum at least each member's (None without the three),
    its margin against one test image's worth and the test size (`sizes`: a score file's n_images, n_captions)."""
    rsum = {name: sum(values) for name, values in rows}
    if not {"SGR", "SAF", "SGRAF"} <= rsum.keys():
        return None
    best = max(rsum["SGR"], rsum["SAF"])
    holds = rsum["SGRAF"] >= best
    line = (f"direction: SGRAF's rSum {rsum['SGRAF']:.1f} against SGR {rsum['SGR']:.1f} and SAF {rsum['SAF']:.1f}: "
            + ("at least each member, as the paper's Table 1" if holds else "NOT at least each member here"))
    if not sizes or not sizes.get("n_images"):
        return line + "; test size not recorded, so no noise band"
    images, captions = sizes["n_images"], sizes.get("n_captions")
    unit = 100 / images
    return (line + f"; {against_noise(rsum['SGRAF'] - best, unit, f'one test image = {unit:.1f} R@K points')}"
            + f" (test split: {images} images" + (f", {captions} captions)" if captions else ")"))


def main(argv: list[str]) -> None:
    title, rows, paper, sizes = argv[0], [], None, None
    for arg in argv[1:]:
        if arg.startswith("--paper="):
            paper = arg.split("=", 1)[1]
            continue
        name, value = arg.split("=", 1)
        if name == "chance":
            rows.append(("chance", chance_of(value)))
            sizes = load(value)
        else:
            rows.append((name, recalls(value)))
    print(title)
    print(f"{'':<14}{'Sentence Retrieval':<23}{'Image Retrieval':<23}")
    print(f"{'Method':<14}{'R@1':>6} {'R@5':>6} {'R@10':>6}   {'R@1':>6} {'R@5':>6} {'R@10':>6}   {'rSum':>7}")
    for name, values in rows:
        print(row(name, values))
    verdict = direction(rows, sizes)
    if verdict:
        print(verdict)
    if paper:
        print(f"paper ({paper}):")
        for name, values in PAPER[paper].items():
            print(row(f"  {name}", values))


if __name__ == "__main__":
    main(sys.argv[1:])

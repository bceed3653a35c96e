"""Print L2C's Table 1 (validation and test BLEU-4 / ROUGE-L / CIDEr-D per method) and Table 3 (ablations,
validation) from `vltools score caption` JSON files, beside the paper's Birds-to-Words numbers.

Usage: python table.py TITLE DIR   (DIR holds <row>_val.json and <row>_test.json for every row below, scores of
the descriptions <row>_val.jsonl and <row>_test.jsonl, written by <row>.pt)
Scores are x100 as in the paper. Each split's block ends with its number of distinct descriptions
(vltools.reporting.tables): one description for half of the pairs or more prints as COLLAPSED, with a note after
the tables naming the model. Human is '-': a leave-one-out human score would compare one description
with the remaining ones, i.e. against fewer references than the models get, so it is not comparable. A direction
line says whether L2C's test ROUGE-L is above each baseline's, as the paper's Table 1 has it, with the test size (the
pairs of l2c_test.jsonl) and the smallest margin against what one test pair can move the mean (100 / pairs ROUGE-L
points; each pair scores 0-1): a margin under one pair is "within noise".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from vltools.io.caption_files import read_caption_file
from vltools.reporting.tables import HEAD, WIDTH, SpreadColumn, against_noise

METRICS = ("Bleu_4", "ROUGE_L", "CIDEr")
BASELINES = ("most_frequent", "text_only")
TABLE1 = (("Most Frequent", "most_frequent"), ("Text-Only", "text_only"), ("CNN+LSTM", "cnn_lstm"),
          ("L2C [B2W]", "l2c_b2w"), ("L2C [CUB+B2W]", "l2c"), ("Human", None))
TABLE3 = (("L2C", "l2c"), ("- Semantic Pooling", "no_pooling"), ("- TV Loss", "no_tv"), ("- GCN", "no_gcn"))
# the paper's Table 1 (validation then test BLEU-4, ROUGE-L, CIDEr-D) and Table 3 (validation)
PAPER1 = {"Most Frequent": (20.0, 31.0, 42.0, 20.0, 30.0, 43.0), "Text-Only": (14.0, 36.0, 5.0, 14.0, 36.0, 7.0),
          "CNN+LSTM": (25.1, 43.4, 10.2, 24.9, 43.2, 9.9), "L2C [B2W]": (31.9, 45.7, 15.2, 31.3, 45.3, 15.1),
          "L2C [CUB+B2W]": (32.3, 46.2, 16.4, 31.8, 45.6, 16.3), "Human": (26.0, 47.0, 39.0, 27.0, 47.0, 42.0)}
PAPER3 = {"L2C": (31.9, 45.7, 15.2), "- Semantic Pooling": (24.5, 43.2, 7.2), "- TV Loss": (29.3, 44.8, 13.6),
          "- GCN": (30.2, 43.5, 10.7)}


def scores(folder: Path, row: str | None, split: str) -> tuple[float, ...] | None:
    """BLEU-4, ROUGE-L, CIDEr-D (x100) of a row's score file, or None for a row without one."""
    if row is None:
        return None
    result = json.loads((folder / f"{row}_{split}.json").read_text(encoding="utf-8"))
    return tuple(100 * result[m] for m in METRICS)


def cells(values: tuple[float, ...] | None, count: int = 3) -> str:
    return " ".join(f"{v:7.1f}" for v in values) if values is not None else " ".join(f"{'-':>7}" for _ in range(count))


def spread(column: SpreadColumn, folder: Path, name: str, row: str | None, split: str) -> str:
    """The distinct-descriptions cell of a row's split (blank for a row without descriptions)."""
    if row is None:
        return column.cell(name, None)
    return column.cell(f"{name} ({split})", folder / f"{row}_{split}.jsonl",
                       None if row in BASELINES else folder / f"{row}.pt")


def direction(folder: Path) -> str:
    """The paper's claim read off Table 1's test block: L2C [CUB+B2W] above Most Frequent, Text-Only and CNN+LSTM on
    ROUGE-L (the paper's main metric; on Birds-to-Words Most Frequent wins CIDEr-D, so CIDEr-D is not the claim),
    the smallest margin against one test pair's worth and the test size."""
    ours = scores(folder, "l2c", "test")[1]
    others = {name: scores(folder, row, "test")[1] for name, row in TABLE1[:3]}
    beaten = all(ours > value for value in others.values())
    line = (f"direction: L2C [CUB+B2W]'s test ROUGE-L {ours:.1f} against "
            + ", ".join(f"{name} {value:.1f}" for name, value in others.items()) + ": "
            + ("above each, as the paper's Table 1" if beaten else "NOT above each here"))
    described = folder / "l2c_test.jsonl"
    if not described.exists():
        return line + "; test size not recorded (no l2c_test.jsonl), so no noise band"
    pairs = len(read_caption_file(described).texts)
    unit = 100 / pairs
    return (line + f"; {against_noise(ours - max(others.values()), unit, f'one test pair = {unit:.1f} ROUGE-L points')}"
            + f" (test split: {pairs} pairs)")


def main(argv: list[str]) -> None:
    title, folder = argv[0], Path(argv[1])
    column = SpreadColumn()
    header = f"{'BLEU-4':>7} {'ROUGE-L':>7} {'CIDEr-D':>7}"
    print(title)
    print(f"Table 1{'':<13}{'Validation':^23}{'':<{WIDTH + 1}}   {'Test':^23}")
    print(f"{'Method':<20}{header} {HEAD:>{WIDTH}}   {header} {HEAD:>{WIDTH}}")
    for name, row in TABLE1:
        print(f"{name:<20}{cells(scores(folder, row, 'val'))} {spread(column, folder, name, row, 'val')}   "
              f"{cells(scores(folder, row, 'test'))} {spread(column, folder, name, row, 'test')}")
    print(direction(folder))
    print("paper (Birds-to-Words):")
    for name, values in PAPER1.items():
        print(f"  {name:<18}{cells(values[:3])} {'':>{WIDTH}}   {cells(values[3:])}")
    print()
    print(f"Table 3 (validation){'':<0}")
    print(f"{'Model':<20}{header} {HEAD:>{WIDTH}}   paper: {header}")
    for name, row in TABLE3:
        print(f"{name:<20}{cells(scores(folder, row, 'val'))} {spread(column, folder, name, row, 'val')}"
              f"          {cells(PAPER3[name])}")
    notes = column.notes()
    if notes:
        print("\n" + "\n".join(notes))


if __name__ == "__main__":
    main(sys.argv[1:])

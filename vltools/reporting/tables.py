"""The distinct-captions column of the examples' printed tables (examples/*/table.py).

Every captioning row states how many different captions its captioner wrote (`distinct/images`, or pairs); a row
where one caption covers half of them or more prints as COLLAPSED, and the table ends with one line per such row
saying which caption it is and which model to look at. Usage::

    column = SpreadColumn()
    print(label, scores..., column.cell(label, "out/nt.caps.jsonl", model="out/nt.pt"))
    print("\\n".join(column.notes()))
"""

from __future__ import annotations

import os
from pathlib import Path

from vltools.eval.spread import CaptionSpread, caption_spread
from vltools.io.caption_files import read_caption_file

HEAD = "distinct"
WIDTH = 15


def read_spread(path: str | os.PathLike) -> tuple[CaptionSpread, str]:
    """The spread of a caption file's captions, the first one of each image or pair (JSONL or COCO JSON), and what
    they describe ("images" or "pairs")."""
    captions = read_caption_file(path)
    spread = caption_spread(texts[0] for texts in captions.texts.values())
    return spread, "pairs" if captions.key == "pair_id" else "images"


class SpreadColumn:
    """Cells of the distinct-captions column, remembering the collapsed rows for `notes`."""

    def __init__(self) -> None:
        self.collapsed: list[tuple[str, CaptionSpread, str, Path, str | None]] = []

    def cell(self, label: str, captions: str | os.PathLike | None, model: str | os.PathLike | None = None) -> str:
        """`distinct/images` of the row's caption file (COLLAPSED added when one caption covers half or more),
        right-aligned in WIDTH; '-' when the file is missing, blank for a row without captions (None). `model` is
        the checkpoint that wrote them (None: a baseline without one)."""
        if captions is None:
            return " " * WIDTH
        path = Path(captions)
        if not path.exists():
            return f"{'-':>{WIDTH}}"
        spread, items = read_spread(path)
        text = f"{spread.distinct}/{spread.items}"
        if spread.collapsed:
            if path not in [row[3] for row in self.collapsed]:
                self.collapsed.append((label, spread, items, path, None if model is None else str(model)))
            text += " COLLAPSED"
        return f"{text:>{WIDTH}}"

    def notes(self) -> list[str]:
        """One line per collapsed caption file (under its first row's label): its caption, how many images it
        covers, and what to look at."""
        lines = []
        for label, spread, items, path, model in self.collapsed:
            look = (f"look at {model} and its training log {model}.log.jsonl" if model is not None
                    else "a baseline: no model")
            lines.append(f"COLLAPSED {label.strip()}: {path.name} says \"{spread.top_caption}\" for {spread.top} "
                         f"of {spread.items} {items}; {look}")
        return lines


def against_noise(margin: float, band: float, band_text: str) -> str:
    """How a direction line's margin compares with the table's noise: `band` in points, named by `band_text` ("one
    test image = 3.3 R@1 points", "the seeds' spread, std 1.6"). A margin smaller than the band is within noise:
    'margin -0.4, within noise (under one test image = 1.0 R@1 points)'; else 'margin +5.0, beyond ...'."""
    within = abs(margin) < band * (1 - 1e-9)
    return f"margin {margin:+.1f}, " + (f"within noise (under {band_text})" if within else f"beyond {band_text}")

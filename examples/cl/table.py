"""Print Dai & Lin's Tables 1, 4, 5 and 6 layouts from `vltools score caption` / `score self-retrieval` JSON files.

Usage: python table.py TITLE DIR
DIR holds, per method M, M.scores.json (score caption) and, for Table 1's rows, M.retrieval.json (score
self-retrieval). Methods: mostfreq (the most frequent training caption for every image), nt, aa (MLE),
aa_il, aa_clp, aa_cln, aa_cl (CL, AA target and reference), nt_cl (NT/NT), nt_claa (NT target, AA reference),
aa_cl2 (run 2: the reference replaced by run 1's best target). A missing file prints as "-". Table 1's chance
row is exact for a uniformly random ranking of the n test images: R@K = min(K, n) / n.
Every captioning row ends with its number of distinct test captions (M.caps.jsonl; vltools.reporting.tables): one
caption for half of the images or more prints as COLLAPSED, and a note under the tables names the model (M.pt).
The paper's MSCOCO rows follow each table for comparison; the toy numbers prove the machinery, not the paper.
The direction line gives the test size (n_images of aa.retrieval.json) and each R@1 margin against one test image
(100 / n_images R@1 points): a margin under one image (the same R@1, the mean rank deciding) is "within noise".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from vltools.reporting.tables import HEAD, WIDTH, SpreadColumn, against_noise

CAPTION = ("Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr")
CAPTION_HEAD = ("B-1", "B-2", "B-3", "B-4", "METEOR", "ROUGE_L", "CIDEr")
RECALL = ("R@1", "R@5", "R@50", "R@500")
PAPER_1 = {"Neuraltalk2": (0.02, 0.32, 3.02, 27.50, 0.652, 0.827),
           "AdaptiveAttention": (0.10, 0.96, 11.76, 78.46, 0.689, 1.004),
           "AdaptiveAttention + CL": (0.32, 1.18, 11.84, 80.96, 0.695, 1.029)}
PAPER_4 = {"AdaptiveAttention (Base)": (0.733, 0.572, 0.433, 0.327, 0.260, 0.540, 1.042),
           "Base + IL": (0.706, 0.544, 0.408, 0.307, 0.253, 0.530, 1.004),
           "Base + GAN": (0.629, 0.437, 0.290, 0.190, 0.212, 0.458, 0.700),
           "Base + CL(P)": (0.735, 0.573, 0.437, 0.334, 0.262, 0.545, 1.059),
           "Base + CL(N)": (0.539, 0.411, 0.299, 0.212, 0.246, 0.479, 0.603),
           "Base + CL(Full)": (0.755, 0.598, 0.460, 0.353, 0.271, 0.559, 1.142)}
PAPER_5 = {"NT / -": (0.697, 0.525, 0.389, 0.291, 0.238, 0.516, 0.882),
           "NT / NT": (0.708, 0.536, 0.399, 0.300, 0.242, 0.524, 0.905),
           "NT / AA": (0.716, 0.547, 0.411, 0.311, 0.249, 0.533, 0.956),
           "AA / -": (0.733, 0.572, 0.433, 0.327, 0.260, 0.540, 1.042),
           "AA / AA": (0.755, 0.598, 0.460, 0.353, 0.271, 0.559, 1.142)}
PAPER_6 = {"0": PAPER_5["AA / -"], "1": PAPER_5["AA / AA"], "2": (0.756, 0.598, 0.460, 0.353, 0.272, 0.559, 1.142)}


def load(folder: Path, name: str, kind: str) -> dict | None:
    path = folder / f"{name}.{kind}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def cells(values: list[float | None], digits: int = 3) -> str:
    return " ".join(f"{v:8.{digits}f}" if v is not None else f"{'-':>8}" for v in values)


def caption_values(folder: Path, name: str) -> list[float | None]:
    scores = load(folder, name, "scores")
    return [scores.get(k) if scores else None for k in CAPTION]


def table(title: str, head: tuple[str, ...], rows: list[tuple[str, str, list[float | None]]],
          paper: dict[str, tuple[float, ...]], spread: Spread, width: int = 26, digits: tuple[int, ...] = ()) -> None:
    """Rows are (label, method, values); each ends with the method's distinct-captions cell."""
    print(f"\n{title}")
    print(f"{'':<{width}}" + " ".join(f"{h:>8}" for h in head) + f" {HEAD:>{WIDTH}}")
    for label, name, values in rows:
        print((f"{label:<{width}}" + " ".join(cells([v], digits[i] if digits else 3) for i, v in enumerate(values))
               + " " + spread(label, name)).rstrip())
    print(f"{'paper (MSCOCO)':<{width}}")
    for label, values in paper.items():
        print(f"{'  ' + label:<{width}}" + " ".join(cells([v], digits[i] if digits else 3)
                                                   for i, v in enumerate(values)))


class Spread:
    """The distinct-captions cell of a method's test captions (M.caps.jsonl, written by M.pt)."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.column = folder, SpreadColumn()

    def __call__(self, label: str, name: str) -> str:
        if not name:    # the chance row
            return self.column.cell(label, None)
        model = None if name == "mostfreq" else self.folder / f"{name}.pt"
        return self.column.cell(label, self.folder / f"{name}.caps.jsonl", model)


def direction(folder: Path) -> str:
    """The paper's claim read off Table 1: CL's captions find their own image more often (self-retrieval R@1, ties by
    mean rank) than the MLE model they start from, and above chance; IL's, beside it, which the paper does not
    report (its Table 4 finds IL below the base model on every captioning metric). Each margin is set against one
    test image's worth of R@1."""
    base = load(folder, "aa", "retrieval")
    if base is None:
        return "direction: no AdaptiveAttention self-retrieval to compare with"
    chance = 100.0 / base["n_images"]
    unit = 100.0 / base["n_images"]     # one image found or lost
    verdicts = []
    for label, name in (("IL", "aa_il"), ("CL", "aa_cl")):
        scores = load(folder, name, "retrieval")
        if scores is None:
            verdicts.append(f"  {label}: not run")
            continue
        better = (scores["R@1"], -scores["meanr"]) > (base["R@1"], -base["meanr"]) and scores["R@1"] > chance
        claim = "as the paper claims" if label == "CL" else "not reported in the paper"
        noise = against_noise(scores["R@1"] - base["R@1"], unit, "one test image")
        verdicts.append(f"  {label}: R@1 {scores['R@1']:.1f} (mean rank {scores['meanr']:.1f}): "
                        + (f"more distinctive ({claim})" if better else f"NOT more distinctive here ({claim})")
                        + f"; {noise}")
    return (f"direction (self-retrieval R@1 against AdaptiveAttention's {base['R@1']:.1f}, mean rank "
            f"{base['meanr']:.1f}; chance {chance:.1f}; test split: {base['n_images']} images, one image = "
            f"{unit:.1f} R@1 points):\n" + "\n".join(verdicts))


def main(argv: list[str]) -> None:
    title, folder = argv[0], Path(argv[1])
    spread = Spread(folder)
    print(title)
    rows1 = []
    any_recall = next((r for r in (load(folder, n, "retrieval") for n in ("aa", "nt", "aa_cl")) if r), None)
    if any_recall:      # a uniformly random ranking of n images finds the own image in the top K with K / n
        n = any_recall["n_images"]
        rows1.append(("chance", "", [100 * min(int(k[2:]), n) / n for k in RECALL] + [None, None]))
    for label, name in (("most frequent caption", "mostfreq"), ("Neuraltalk2", "nt"), ("AdaptiveAttention", "aa"),
                        ("AdaptiveAttention + IL", "aa_il"), ("AdaptiveAttention + CL", "aa_cl")):
        recall = load(folder, name, "retrieval")
        scores = load(folder, name, "scores")
        rows1.append((label, name, [recall.get(k) if recall else None for k in RECALL]
                      + [scores.get(k) if scores else None for k in ("ROUGE_L", "CIDEr")]))
    table("Table 1: self retrieval top-K recall (%) and captioning", (*RECALL, "ROUGE_L", "CIDEr"), rows1, PAPER_1,
          spread, digits=(2, 2, 2, 2, 3, 3))
    print(direction(folder))
    table("Table 4: learning methods (AdaptiveAttention base; GAN is not built)", CAPTION_HEAD,
          [(label, name, caption_values(folder, name)) for label, name in (
              ("most frequent caption", "mostfreq"), ("AdaptiveAttention (Base)", "aa"), ("Base + IL", "aa_il"),
              ("Base + CL(P)", "aa_clp"), ("Base + CL(N)", "aa_cln"), ("Base + CL(Full)", "aa_cl"))], PAPER_4, spread)
    table("Table 5: target / reference model (NT Neuraltalk2, AA AdaptiveAttention; - = MLE)", CAPTION_HEAD,
          [(label, name, caption_values(folder, name)) for label, name in (
              ("NT / -", "nt"), ("NT / NT", "nt_cl"), ("NT / AA", "nt_claa"), ("AA / -", "aa"),
              ("AA / AA", "aa_cl"))], PAPER_5, spread)
    table("Table 6: reference replacement (run 0 MLE; run 1 CL with ref = run 0; run 2 ref = run 1's best)",
          CAPTION_HEAD, [(label, name, caption_values(folder, name)) for label, name in (
              ("0", "aa"), ("1", "aa_cl"), ("2", "aa_cl2"))], PAPER_6, spread)
    notes = spread.column.notes()
    if notes:
        print("\n" + "\n".join(notes))


if __name__ == "__main__":
    main(sys.argv[1:])

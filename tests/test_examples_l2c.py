"""examples/l2c's real recipe on a miniature in the real on-disk layout: the Birds-to-Words TSV (the real sample
descriptions from tests/data), iNaturalist photos/<id>/medium.jpg, CUB-200-2011's images.txt, images/,
segmentations/, Reed's text_c10/ and class splits; random images and weights, the shrinking make variables.
Asserts that `make table` prints every row of Tables 1 and 3."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pipeline_fixtures import run_process

from vltools.data.converters.birds_to_words import COLUMNS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "tests" / "data" / "convert" / "birds_to_words" / "README.md"
CLASSES = ("001.Black_footed_Albatross", "002.Laysan_Albatross", "003.Sooty_Albatross")
# 20 epochs of 3 steps at lr 1e-2 (seconds each): a model trained less starts every description with <end> (the
# commonest target token), and `caption` refuses a run whose descriptions are all empty
SHRINK = ["BACKBONE=resnet18", "WEIGHTS=none", "SEG_WEIGHTS=none", "IMAGE_SIZE=64", "EPOCHS=20", "BATCH=4",
          "AUX_BATCH=4", "BEAM=2", "DEVICE=cpu",
          "EXTRA=--lr 1e-2 --set model.pool_hidden=8 --set model.graph_dim=8 --set model.embed_size=8 "
          "--set model.hidden_size=8 --set model.attention_size=8 --set task.min_count=1 --set task.val_max_len=8"]


def descriptions() -> list[str]:
    return re.findall(r"^\d\. (.+)$", README.read_text(encoding="utf-8"), flags=re.M)


def photo(path: Path, rng: np.random.Generator, mode: str = "RGB") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode == "L":
        Image.fromarray((rng.random((48, 64)) > 0.5).astype(np.uint8) * 255, "L").save(path)
    else:
        Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(path)


def make_data(root: Path) -> None:
    rng = np.random.default_rng(0)
    texts = descriptions()
    rows = [list(COLUMNS)]
    for n, split in enumerate(["train"] * 6 + ["val"] * 2 + ["test"] * 2):
        urls = [f"https://static.inaturalist.org/photos/{1000 + 2 * n + side}/medium.jpg" for side in (0, 1)]
        for url in urls:
            photo(root / "b2w_images" / url.split("/", 3)[3], rng)
        for k in range(2):
            rows.append([f"https://www.inaturalist.org/observations/{n}a", urls[0], "species a", "base",
                         f"https://www.inaturalist.org/observations/{n}b", urls[1], "species b", "visual", split,
                         str(k + 1), texts[(n + k) % len(texts)]])
    (root / "birds-to-words-v1.0.tsv").write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    cub, lines = root / "CUB_200_2011", []
    sentences = [s.strip() for text in texts for s in text.split(".") if s.strip()]
    for c, name in enumerate(CLASSES):
        for i in range(3):
            image = f"{name}/{name.split('.')[1]}_{c:04d}_{i}"
            lines.append(f"{len(lines) + 1} {image}.jpg")
            photo(cub / "images" / f"{image}.jpg", rng)
            photo(root / "segmentations" / f"{image}.png", rng, mode="L")
            text = root / "text_c10" / f"{image}.txt"
            text.parent.mkdir(parents=True, exist_ok=True)
            text.write_text("\n".join(sentences[(c + i + k) % len(sentences)] for k in range(10)) + "\n")
    (cub / "images.txt").write_text("\n".join(lines) + "\n")
    (root / "trainvalclasses.txt").write_text("\n".join(CLASSES[:2]) + "\n")
    (root / "testclasses.txt").write_text(CLASSES[2] + "\n")


def test_real_recipe_prints_every_row(tmp_path):
    data = tmp_path / "l2c_data"
    make_data(data)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    vltools = f"{sys.executable} -m vltools --quiet"
    result = run_process(["make", "--no-print-directory", "-j2", "-C", str(ROOT / "examples" / "l2c"),
                          f"DATA={data}", f"OUT={tmp_path / 'out'}", f"VLTOOLS={vltools}",
                          f"PYTHON={sys.executable}", *SHRINK, "table"],
                         capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    table = result.stdout
    for row in ("Most Frequent", "Text-Only", "CNN+LSTM", "L2C [B2W]", "L2C [CUB+B2W]", "Human",
                "- Semantic Pooling", "- TV Loss", "- GCN"):
        assert re.search(rf"^{re.escape(row)}\s+(-|\d+\.\d)", table, flags=re.M), (row, table)
    for row in ("Most Frequent", "Text-Only", "CNN+LSTM", "L2C [B2W]", "L2C [CUB+B2W]"):   # distinct, val and test
        assert re.search(rf"^{re.escape(row)} .* \d+/\d+( COLLAPSED)? .* \d+/\d+( COLLAPSED)?$", table,
                         flags=re.M), (row, table)
    for row in ("- Semantic Pooling", "- TV Loss", "- GCN"):
        assert re.search(rf"^{re.escape(row)} .* \d+/\d+( COLLAPSED)? ", table, flags=re.M), (row, table)
    assert re.search(r"^L2C Tables 1 and 3, Birds-to-Words", table, flags=re.M), table
    lines = {line.split("  ")[0]: line for line in table.splitlines()}
    test_rouge = {row: float(re.search(r"/\d+(?: COLLAPSED)? +\S+ +(\S+)", lines[row]).group(1))   # after val's
                  for row in ("Most Frequent", "Text-Only", "CNN+LSTM", "L2C [CUB+B2W]")}
    ours = test_rouge.pop("L2C [CUB+B2W]")
    verdict = "above each, as the paper's Table 1" if all(ours > v for v in test_rouge.values()) else "NOT above"
    assert re.search(rf"^direction: L2C \[CUB\+B2W\]'s test ROUGE-L {ours:.1f} against Most Frequent "
                     rf"{test_rouge['Most Frequent']:.1f}, .*: {verdict}", table, flags=re.M), table

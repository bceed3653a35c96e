"""examples/cl's real recipe (COCO, Karpathy splits) on a miniature in the real on-disk layout: DATA/dataset_coco.json
(Karpathy's format, real COCO captions from tests/data) and DATA/train2014/, DATA/val2014/ JPEGs named as COCO names
them (random pixels), run with the Makefile's shrinking variables; the four tables must print every row."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pipeline_fixtures import run_process

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
REFS = ROOT / "tests" / "data" / "convert" / "coco_caption" / "fakecap_refs_first60.spice_input.json"
SPLITS = ["train"] * 8 + ["restval"] * 2 + ["val"] * 4 + ["test"] * 4


def make_coco(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    entries = json.loads(REFS.read_text(encoding="utf-8"))[:len(SPLITS)]
    images, sentid = [], 0
    for imgid, (entry, split) in enumerate(zip(entries, SPLITS, strict=True)):
        filepath = "train2014" if split == "train" else "val2014"
        filename = f"COCO_{filepath}_{entry['image_id']:012d}.jpg"
        (folder / filepath).mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)).save(folder / filepath / filename)
        sentences = []
        for text in entry["refs"]:
            sentences.append({"tokens": text.split(), "raw": text.capitalize() + ".", "imgid": imgid,
                              "sentid": sentid})
            sentid += 1
        images.append({"filepath": filepath, "filename": filename, "imgid": imgid, "split": split,
                       "cocoid": entry["image_id"], "sentids": [s["sentid"] for s in sentences],
                       "sentences": sentences})
    (folder / "dataset_coco.json").write_text(json.dumps({"images": images, "dataset": "coco"}), encoding="utf-8")
    return folder


def test_real_recipe_miniature_prints_every_row(tmp_path):
    data = make_coco(tmp_path / "coco")
    small = "--set model.embed_size=16 --set model.hidden_size=16 --set model.dropout=0.0"
    result = run_process(
        ["make", "--no-print-directory", "-j2", "-C", str(ROOT / "examples" / "cl"), f"DATA={data}",
         f"OUT={tmp_path / 'out'}",
         f"VLTOOLS={sys.executable} -m vltools --quiet", f"PYTHON={sys.executable}", "MLE_EPOCHS=1", "CL_EPOCHS=1",
         "BATCH=10", "MIN_COUNT=2", "IMAGE_SIZE=64", "BACKBONE=resnet18", "WEIGHTS=none", "WORKERS=0",
         "EXTRACT_BATCH=8", "DEVICE=cpu", "MLE_LR=2e-2", "CL_LR=1e-3", f"SIZES={small}",
         f"AA_SIZES={small} --set model.attention_size=8", "table"],
        capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    table = result.stdout
    for line in ("Table 1", "Table 4", "Table 5", "Table 6", "most frequent caption", "Neuraltalk2",
                 "AdaptiveAttention + IL", "AdaptiveAttention + CL", "Base + IL", "Base + CL(P)", "Base + CL(N)",
                 "Base + CL(Full)", "NT / NT", "NT / AA", "AA / AA"):
        assert line in table, table
    rows = [line for line in table.splitlines()
            if not line.startswith("  ") and line[:26].strip() in ("0", "1", "2", "NT / AA", "Base + CL(N)")]
    assert len(rows) == 5 and all("-" not in line[26:] for line in rows), table
    captioning = [line for line in table.splitlines()
                  if not line.startswith(("  ", "Table", "chance", "COLLAPSED", "direction"))
                  and line[:26].strip() and re.search(r"\d\.\d{3}", line)]
    assert len(captioning) == 19, table     # Tables 1, 4, 5 and 6: 5 + 6 + 5 + 3 rows
    assert re.search(r"^direction \(self-retrieval .*\n  IL: R@1 .*\n  CL: R@1 ", table, flags=re.M), table
    for line in captioning:                 # each with its distinct test captions (of the 4 test images)
        assert re.search(r" [1-4]/4( COLLAPSED)?$", line), (line, table)
    captions = [json.loads(line) for line in (tmp_path / "out" / "aa_cl2.caps.jsonl").read_text().splitlines()]
    assert [c["image_id"] for c in captions] == [f"val2014/{image['filename']}" for image in
                                                 json.loads((data / "dataset_coco.json").read_text())["images"]
                                                 if image["split"] == "test"]

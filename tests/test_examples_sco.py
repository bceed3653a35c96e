"""SCO's real recipe (examples/sco/Makefile), both branches, on miniatures in the real on-disk layouts: Karpathy's
dataset_flickr30k.json beside images/<filename>.jpg, and dataset_coco.json beside images/train2014|val2014/ (real
Flickr captions from tests/data), shrunk with the Makefile's variables; the table must print every Table 2 row and
the Table 3 rows."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA
from PIL import Image
from pipeline_fixtures import run_process

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).parent.parent / "examples" / "sco"
ROWS = ["ctx (1-crop)", "ctx + sen", "ctx + gen (S)", "ctx + gen (E)", "ctx + gen", "cnp + gen", "cnp + ctx (C)",
        "cnp + ctx + gen"]


def karpathy_miniature(folder: Path, dataset: str) -> None:
    """12 images (8 train, 2 val, 2 test) with real Flickr8k captions and random 80 x 64 JPEGs, in Karpathy's
    layout: dataset_flickr30k.json beside images/<filename>, or dataset_coco.json beside
    images/<filepath>/<filename> (train2014 / val2014, COCO's file names)."""
    captions: dict[str, list[str]] = {}
    for line in (DATA / "convert" / "flickr8k" / "Flickr8k.token.txt").read_text().splitlines():
        key, text = line.split("\t", 1)
        captions.setdefault(key.split("#")[0], []).append(text)
    names = sorted(captions)[:12]
    rng = np.random.default_rng(0)
    images = []
    for n, name in enumerate(names):
        split = "train" if n < 8 else "val" if n < 10 else "test"
        record = {"imgid": n, "split": split, "sentids": list(range(5 * n, 5 * n + 5)),
                  "sentences": [{"raw": text, "tokens": text.lower().split(), "imgid": n, "sentid": 5 * n + k}
                                for k, text in enumerate(captions[name][:5])]}
        if dataset == "coco":
            part = "train2014" if split == "train" else "val2014"
            record.update(filepath=part, filename=f"COCO_{part}_{n + 1:012d}.jpg", cocoid=n + 1)
            path = folder / "images" / part / record["filename"]
        else:
            record["filename"] = name
            path = folder / "images" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (64, 80, 3), dtype=np.uint8)).save(path)
        images.append(record)
    name = "coco" if dataset == "coco" else "flickr30k"
    (folder / f"dataset_{name}.json").write_text(json.dumps({"images": images, "dataset": name}))


# Flickr30K's branch builds every row; COCO's, whose difference is the data layout and the coco1k protocol (folds of
# the 2 test images), three of them (each row costs four stages) and Table 3's two reused rows
@pytest.mark.parametrize(("dataset", "title", "extra", "rows"), [
    ("f30k", "SCO Table 2, Flickr30K", [], ["chance", "ctx", "cnp", "cnp + ctx", *ROWS]),
    ("coco", "SCO Table 2, MSCOCO (coco1k", ["PROTOCOL=coco1k --fold-size 1", "ROWS=ctx cnp_ctx cnp_ctx_gen"],
     ["chance", "ctx", "cnp + ctx", "cnp + ctx + gen"]),
])
def test_real_recipe_prints_every_row(tmp_path, dataset, title, extra, rows):
    data = tmp_path / dataset
    karpathy_miniature(data, dataset)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    shrink = ["EPOCHS=1", "CNN_EPOCHS=1", "BATCH=8", "EMBED=16", "WORD=8", "K=16", "LEVELS=1,2", "IMAGE_SIZE=64",
              "CROP=32", "CNN_SIZE=32", "CAP_EPOCHS=1", "CAP_SIZE=16", "CNN_BACKBONE=resnet18",
              "CONTEXT_BACKBONE=resnet18", "WEIGHTS=none", "WORKERS=0", "DEVICE=cpu", "LAMBDAS=0 1",
              f"VLTOOLS={sys.executable} -m vltools", f"PYTHON={sys.executable}"]
    result = run_process(["make", "--no-print-directory", "-j2", "-C", str(EXAMPLE), f"DATA={data}",
                          f"OUT={tmp_path / 'out'}", *shrink, *extra, "table"],
                         capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    table = result.stdout
    assert title in table, table
    table2 = table[table.index(title):].split("\nTable 3")[0].splitlines()[3:]   # after make's commands and the head
    printed = [line.split("  ")[0] for line in table2
               if line and not line.startswith(("paper", "  ", "direction"))]
    assert sorted(printed) == sorted(rows), table
    assert re.search(r"^direction: mR of ctx [\d.]+ against cnp \+ ctx [\d.]+", table, flags=re.M), table
    assert "Table 3 layout" in table and "\n0 " in table and "\n1 " in table
    if dataset == "coco":
        return
    assert re.search(r"^ctx \+ sen .* \d+/12( COLLAPSED)?$", table, flags=re.M), table   # distinct sentences
    assert json.loads((tmp_path / "out" / "concepts.json").read_text())["k"] == 16
    generated = [json.loads(line) for line in (tmp_path / "out" / "generated.jsonl").read_text().splitlines()]
    assert len(generated) == 12 and len({record["image_id"] for record in generated}) == 12   # every image, once

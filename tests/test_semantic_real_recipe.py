"""The real recipe of examples/semantic (Visual Genome layout) on a miniature: the official JSON files (region
descriptions and objects of tests/data, cycled over 30 image ids), JPEG images in VG_100K/, image_data.json, a user
study over its test images (USER_STUDY=FILE), and the Makefile's shrinking variables; both tables must print every
row."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from PIL import Image
from pipeline_fixtures import run_process

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
VG = ROOT / "tests" / "data" / "convert" / "visual_genome"
PHOTOS = ROOT / "tests" / "data" / "photos"
N = 30
QUERIES = 4
TABLE1 = ("Annotators (leave one out)", "Visual baseline: R-MAC", "Object annotations: tf-idf",
          "Human captions: METEOR", "Human captions: word2vec + FV (x5)", "Human captions: tf-idf",
          "Generated captions: tf-idf", "Random (x5)")


def miniature(folder: Path) -> None:
    regions = json.loads((VG / "region_descriptions_v1.2_5images.json").read_text())
    objects = json.loads((VG / "objects_v1.2_5images.json").read_text())
    (folder / "VG_100K").mkdir(parents=True)
    photos = [Image.open(p).convert("RGB") for p in sorted(PHOTOS.iterdir())]
    image_data, region_file, object_file = [], [], []
    for image_id in range(1, N + 1):
        source = (image_id - 1) % 5
        photos[image_id % len(photos)].resize((80, 60)).save(folder / "VG_100K" / f"{image_id}.jpg")
        image_data.append({"width": 80, "height": 60, "image_id": image_id, "coco_id": None, "flickr_id": None,
                           "url": f"https://cs.stanford.edu/people/rak248/VG_100K/{image_id}.jpg"})
        region_file.append({"id": image_id, "regions": [{**r, "image_id": image_id, "x": r["x"] % 60,
                                                         "y": r["y"] % 40, "width": 10, "height": 10,
                                                         "region_id": image_id * 1000 + k}
                                                        for k, r in enumerate(regions[source]["regions"][:40])]})
        object_file.append({"image_id": image_id, "objects": objects[source]["objects"]})
    (folder / "image_data.json").write_text(json.dumps(image_data))
    (folder / "region_descriptions.json").write_text(json.dumps(region_file))
    (folder / "objects.json").write_text(json.dumps(object_file))


def user_study(images: Path, path: Path) -> None:
    """Two triplets for each of the first QUERIES test images (the recipe's queries) over other test images, in the
    recipe's ids (Visual Genome's image ids as strings), with fixed votes (o1, o2, o3)."""
    test = [r["image_id"] for r in map(json.loads, images.read_text().splitlines()) if r["split"] == "test"]
    votes = ((3, 1, 1), (0, 4, 1), (2, 2, 1), (5, 0, 0))
    with path.open("w", encoding="utf-8") as stream:
        for i, query in enumerate(test[:QUERIES]):
            for j in (1, 2):
                o1, o2, o3 = votes[(i + j) % len(votes)]
                stream.write(json.dumps({"query": query, "a": test[(i + j) % len(test)],
                                         "b": test[(i + j + 2) % len(test)], "o1": o1, "o2": o2, "o3": o3}) + "\n")


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_visual_genome_recipe_prints_every_row(tmp_path):
    data = tmp_path / "visual_genome"
    miniature(data)
    out, study = tmp_path / "out", tmp_path / "user_study.jsonl"
    shrink = ["EPOCHS=1", "BATCH=4", "IMAGE_SIZE=64", "BACKBONE=resnet18", "WEIGHTS=none", "POOL=12",
              f"N_QUERIES={QUERIES}", f"QUERIES={QUERIES}", "DATABASE=8", "VAL_IMAGES=6", "TEST_IMAGES=8", "K=3",
              "DEVICE=cpu", "WORKERS=0", "EXTRACT_BATCH=8", "CAPTION_EPOCHS=1", "CAPTION_VAL_IMAGES=6",
              "CAPTION_SIZES=--set model.embed_size=32 --set model.hidden_size=32",
              "TASK_EXTRA=--set task.relevant=2 --set task.per_pair=3 --set task.mine_every=1 "
              "--set task.whiten_images=8 --set task.val_queries=4 --set task.val_images=6 --set task.embed_batch=8"]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "OMP_NUM_THREADS": "1"}
    make = ["make", "-j2", "-C", str(ROOT / "examples" / "semantic"), f"DATA={data}", f"OUT={out}",
            f"PYTHON={sys.executable}", *shrink]
    prepared = run_process([*make, str(out / "images.jsonl")], capture_output=True, text=True, env=env)
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    user_study(out / "images.jsonl", study)
    result = run_process([*make, f"USER_STUDY={study}", "table"], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    for row in ("Text oracle", "Random (x5)", "Visual baseline (V, V)", "WSABIE (V+T, V)", "Proposed (V, V)",
                "Proposed (V+T, V)", "Proposed (V+T, V+T)"):
        assert row in result.stdout, result.stdout
    assert "\nTable 1:" in result.stdout, result.stdout
    table1 = result.stdout.split("\nTable 1:")[1]
    for row in TABLE1:
        assert re.search(rf"^{re.escape(row)} +-?\d+\.\d", table1, re.MULTILINE), table1
    assert re.search(r"^Generated captions: tf-idf .* \d+/\d+( COLLAPSED)?$", table1, re.MULTILINE), table1
    assert (tmp_path / "out" / "figure2.png").exists() and any((tmp_path / "out" / "figure3").glob("*.png"))

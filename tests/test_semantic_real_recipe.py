"""The real recipe of examples/semantic (Visual Genome layout) on a miniature: the official JSON files (region
descriptions and objects of tests/data, cycled over 30 image ids), JPEG images in VG_100K/, image_data.json, and
the Makefile's shrinking variables; the table must print every row."""

from __future__ import annotations

import json
import os
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


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_visual_genome_recipe_prints_every_row(tmp_path):
    data = tmp_path / "visual_genome"
    miniature(data)
    shrink = ["EPOCHS=1", "BATCH=4", "IMAGE_SIZE=64", "BACKBONE=resnet18", "WEIGHTS=none", "POOL=12", "N_QUERIES=4",
              "QUERIES=4", "DATABASE=8", "VAL_IMAGES=6", "TEST_IMAGES=8", "K=3", "DEVICE=cpu",
              "TASK_EXTRA=--set task.relevant=2 --set task.per_pair=3 --set task.mine_every=1 "
              "--set task.whiten_images=8 --set task.val_queries=4 --set task.val_images=6 --set task.embed_batch=8"]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "OMP_NUM_THREADS": "1"}
    result = run_process(["make", "-j2", "-C", str(ROOT / "examples" / "semantic"), f"DATA={data}",
                          f"OUT={tmp_path / 'out'}", f"PYTHON={sys.executable}", *shrink, "table"],
                         capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    for row in ("Text oracle", "Random (x5)", "Visual baseline (V, V)", "WSABIE (V+T, V)", "Proposed (V, V)",
                "Proposed (V+T, V)", "Proposed (V+T, V+T)"):
        assert row in result.stdout, result.stdout
    assert (tmp_path / "out" / "figure2.png").exists() and any((tmp_path / "out" / "figure3").glob("*.png"))

"""`make demo`'s script as a user runs it, shrunk (200 images, 1 epoch): the project's real photos go through the
same extractor as the synthetic world (the ResNet-18 trained on the world's labels), into the SGR trained on it, are
matched with their captions, scored, and drawn as the report whose path the last lines print; a SYNTH_BACKBONE
other than trained or random is refused before any work."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import h5py
import pytest
from pipeline_fixtures import run_process

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "demo" / "demo.sh"
PHOTOS = sorted(path.name for path in (ROOT / "tests" / "data" / "photos").iterdir())


@pytest.mark.slow
def test_demo_runs_real_photos_through_the_headline_pipeline(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "SYNTH_IMAGES": "200", "EPOCHS": "1", "BACKBONE_EPOCHS": "1"}
    out = tmp_path / "demo"
    result = run_process(["bash", DEMO, out], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-3000:]

    report = out / "report" / "index.html"
    assert f"Open {report} in a browser" in result.stdout.splitlines()[-2]
    assert report.is_file()
    thumbs = {path.name for path in (out / "report").rglob("*.jpg")} | {path.name
                                                                       for path in (out / "report").rglob("*.png")}
    assert len(thumbs) >= len(PHOTOS)

    rankings = [json.loads(line) for line in (out / "photos_rankings.jsonl").read_text().splitlines()]
    assert sorted(r["query"] for r in rankings if r["direction"] == "i2t") == PHOTOS
    assert sum(r["direction"] == "t2i" for r in rankings) == 2 * len(PHOTOS)   # two captions a photo
    for photo in PHOTOS:   # each photo's line names its best caption and whether it is one of its own
        assert any(line.lstrip().startswith(photo) and ("(right)" in line or "(wrong)" in line)
                   for line in result.stdout.splitlines())

    world = json.loads((out / "test_scores.json").read_text())
    photos = json.loads((out / "photos_scores.json").read_text())
    assert world["n_images"] == 20 and photos["n_images"] == len(PHOTOS)   # the world's test split: 10%
    for features in ("world.h5", "photos.h5"):   # one extractor: the world's trained ResNet-18
        with h5py.File(out / features) as handle:
            assert handle.attrs["weights"].startswith("synth_resnet18.pt (sha256 ")


def test_an_unknown_backbone_choice_is_refused_before_any_work(tmp_path):
    env = {**os.environ, "SYNTH_BACKBONE": "imagenet"}
    result = run_process(["bash", DEMO, tmp_path / "demo"], capture_output=True, text=True, env=env)
    assert result.returncode == 2 and "SYNTH_BACKBONE=imagenet: use trained or random" in result.stderr
    assert not (tmp_path / "demo").exists()

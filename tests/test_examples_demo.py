"""`make demo`'s script as a user runs it, shrunk (200 images, 1 epoch): the project's real photos go through the
same extractor as the synthetic world, into the SGR trained on it, are matched with their captions, scored, and
drawn as the report whose path the last lines print."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from pipeline_fixtures import run_process

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "demo" / "demo.sh"
PHOTOS = sorted(path.name for path in (ROOT / "tests" / "data" / "photos").iterdir())


@pytest.mark.slow
def test_demo_runs_real_photos_through_the_headline_pipeline(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "SYNTH_IMAGES": "200", "EPOCHS": "1"}
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

"""The headline pipeline as a user runs it, on real photos: `extract-regions photos/ --regions bottom-up
--num-regions 36 > feats.h5`, then `match --model sgr.pt feats.h5 caps.jsonl` with a tiny SGR whose checkpoint
records bottom-up features (as converted official SGRAF checkpoints do), then `convert to-precomp`, `inspect`, and
two shards merged into what one run gives. The detector is the tiny random one of
tests/test_convert_bottom_up_weights.py saved in the released layout and converted; its regions are 64-d, so the
SGR is built with img_dim 64 (the released weights were not available offline)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from bottom_up_helpers import FEATURE_DIM, save_tiny_detector
from pipeline_fixtures import run, run_process

from vltools.io.checkpoints import save_checkpoint
from vltools.io.features import FeaturesReader
from vltools.io.records import read_records, write_records
from vltools.models import build_model
from vltools.text.vocab import SPECIALS

PHOTOS = Path(__file__).parent / "data" / "photos"
NAMES = sorted(path.name for path in PHOTOS.iterdir())
CAPTIONS = {"chelsea.png": ["a cat looks at the camera", "a grey cat with a white face"],
            "china.jpg": ["a temple with a red roof", "an old building among green trees"],
            "coffee.png": ["a cup of coffee on a plate", "a white cup with a spoon"],
            "flower.jpg": ["a pink flower with a yellow centre", "a flower in the sun"],
            "rocket.jpg": ["a rocket launching into the sky", "smoke under a rocket at launch"]}
SGR = {"img_dim": FEATURE_DIM, "embed_size": 24, "word_dim": 12, "sim_dim": 8, "num_regions": 36, "sgr_step": 2}


def vltools(*args: object, stdout: object = subprocess.PIPE) -> subprocess.CompletedProcess:
    """`vltools ARGS` in a new process, as a user types it; a failure fails the test with its standard error."""
    result = run_process([sys.executable, "-m", "vltools", *map(str, args)], stdout=stdout,
                         stderr=subprocess.PIPE)
    assert result.returncode == 0, result.stderr.decode()
    return result


@pytest.mark.slow
def test_own_photos_into_a_released_style_model(tmp_path):
    assert NAMES == sorted(CAPTIONS)
    weights = save_tiny_detector(tmp_path)
    features = tmp_path / "feats.h5"
    with open(features, "wb") as out:
        vltools("extract-regions", PHOTOS, "--regions", "bottom-up", "--detector-weights", weights,
                "--num-regions", "36", "--workers", "1", stdout=out)
    with FeaturesReader(features) as reader:
        assert reader.ids == NAMES and reader.attrs["extractor"] == "bottom-up"
        assert reader.fields == ["regions", "boxes", "image_size", "labels", "label_scores", "attributes",
                                 "attribute_scores"]
        assert reader.shape("regions") == (5, 36, FEATURE_DIM) and reader.shape("labels") == (5, 36)
        rows = reader.read(NAMES)

    captions = tmp_path / "caps.jsonl"
    write_records(captions, [{"image_id": name, "caption": text} for name in NAMES for text in CAPTIONS[name]])
    words = sorted({word for texts in CAPTIONS.values() for text in texts for word in text.split()})
    torch.manual_seed(0)
    sgr = build_model("sgr", SGR, len(SPECIALS) + len(words))
    save_checkpoint(tmp_path / "sgr.pt", "sgr", SGR, sgr.state_dict(), vocab=[*SPECIALS, *words],
                    train_state={"inputs": {"feature_extractor": "bottom-up"}}, schema=1)
    ranks = tmp_path / "ranks.jsonl"
    matched = vltools("match", "--model", tmp_path / "sgr.pt", features, captions, "-o", ranks)
    assert "trained on" not in matched.stderr.decode()  # the same extractor: no warning
    rankings = read_records(ranks, "rankings")
    caption_ids = [f"{name}#{k}" for name in NAMES for k in range(2)]
    i2t = [r for r in rankings if r["direction"] == "i2t"]
    t2i = [r for r in rankings if r["direction"] == "t2i"]
    assert [r["query"] for r in i2t] == NAMES and [r["query"] for r in t2i] == caption_ids
    assert all(sorted(r["ids"]) == sorted(caption_ids) for r in i2t)  # every caption ranked for every image
    assert all(sorted(r["ids"]) == NAMES for r in t2i)
    assert all(np.isfinite(r["scores"]).all() for r in rankings)

    run("convert", "to-precomp", features, captions, tmp_path / "precomp", "--split", "test")
    ims = np.load(tmp_path / "precomp" / "test_ims.npy")
    assert ims.shape == (5, 36, FEATURE_DIM) and ims.dtype == np.float32
    np.testing.assert_array_equal(ims, rows["regions"].astype(np.float32))
    assert (tmp_path / "precomp" / "test_ids.txt").read_text().split() == NAMES
    assert len((tmp_path / "precomp" / "test_caps.txt").read_text().splitlines()) == 10

    described = json.loads(run("inspect", "--json", features))
    assert described["kind"] == "features" and described["count"] == 5
    assert described["shapes"]["attribute_scores"] == [5, 36]

    shards = []
    for shard in ("0/2", "1/2"):
        shards.append(tmp_path / f"part{shard[0]}.h5")
        run("extract-regions", PHOTOS, "--regions", "bottom-up", "--detector-weights", weights, "--workers", "0",
            "--shard", shard, "-o", shards[-1])
    run("merge", *shards, "-o", tmp_path / "merged.h5")
    with FeaturesReader(tmp_path / "merged.h5") as merged:
        assert sorted(merged.ids) == NAMES
        together = merged.read(NAMES)
    for name, value in rows.items():
        np.testing.assert_allclose(together[name], value, rtol=1e-3, atol=1e-3, err_msg=name)

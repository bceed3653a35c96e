"""The NeuralTalk2 captioners of the recipes' synthetic runs must tell their images apart: trained with each recipe's
DATA=synth settings on its random ResNet-18 features, a captioner writes at least a stated share of distinct
captions for the distinct scenes it captions, and no caption covers half of them (vltools.eval.spread).

Before the captioners standardised their features (vltools.models.captioners, issue 39), every one of these wrote one
caption for all images (the features of a random ResNet-18 differ between images by about 1 % of their mean
square). Measured on 2026-11-27 (OMP_NUM_THREADS=1), distinct captions / images (most common caption's count):
CL 37/60 (10), SCO 74/400 (43), semantic 85/500 (59); before: 1/60, 1/400, 1/500. The semantic captioner learns
the one-object region captions ("a small green star"), which have few distinct forms, hence its lower share.
The AdaptiveAttention captioner of the CL recipe is checked by tests/test_pipeline_cl.py.
"""

from __future__ import annotations

import json

import pytest
from pipeline_fixtures import run, synth_world

from vltools.eval.spread import caption_spread

pytestmark = pytest.mark.slow

NT = ["--model", "neuraltalk2", "--seed", "0", "--device", "cpu", "--val-every", "0", "--batch-size", "50",
      "--lr", "2e-3", "--set", "model.embed_size=128", "--set", "model.hidden_size=128", "--set", "model.dropout=0.2"]
EXTRACT = ["--backbone", "resnet18", "--weights", "none", "--seed", "0", "--workers", "0", "--batch-size", "32",
           "--device", "cpu"]
# recipe: (images, extract-regions options, training captions file, train options, caption options, least share)
RECIPES = {
    "cl": (600, ["--regions", "grid", "--global", "avg", "--image-size", "96", "--dtype", "float32"], "captions.jsonl",
           ["--epochs", "8", "--set", "task.val_images=100"], ["--split", "test", "--beam", "3"], 0.25),
    "sco": (400, ["--regions", "none", "--global", "tencrop", "--crop-size", "32", "--dtype", "float32"],
            "captions.jsonl",
            ["--epochs", "8"], [], 0.1),
    "semantic": (500, ["--regions", "none", "--global", "avg", "--image-size", "64"], "regions.jsonl",
                 ["--epochs", "10"], ["--beam", "3"], 0.1),
}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_recipe_captioner_writes_distinct_captions(tmp_path, recipe):
    images, extract, captions, train, caption, share = RECIPES[recipe]
    world = synth_world(tmp_path / "world", images)
    features = tmp_path / "features.h5"
    run("extract-regions", world / "images.jsonl", *extract, *EXTRACT, "-o", features)
    run("train", *NT, *train, features, world / captions, "-o", tmp_path / "nt.pt")
    written = tmp_path / "nt.caps.jsonl"
    run("caption", "--model", tmp_path / "nt.pt", features, *([world / captions] if "--split" in caption else []),
        *caption, "--device", "cpu", "-o", written)
    spread = caption_spread(json.loads(line)["caption"] for line in written.read_text().splitlines())
    print(recipe, spread)
    assert spread.items == (images // 10 if "--split" in caption else images), spread
    assert spread.distinct >= share * spread.items and not spread.collapsed, spread

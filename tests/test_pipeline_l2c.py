"""End to end on the synthetic world: synth -> segment-pool (mask files) -> train L2C [CUB+B2W] -> caption --pairs
-> score caption, against the Most Frequent and Text-Only baselines (baseline stage) on the test pairs.

L2C must beat both on ROUGE-L (the paper's main metric), and its descriptions must depend on the images (more
than one distinct description). The ablations are compared in examples/l2c/README.md (`make DATA=synth table`).
"""

from __future__ import annotations

import json

import pytest
from pipeline_fixtures import run, synth_world

pytestmark = pytest.mark.slow

# examples/l2c/Makefile's synth recipe with 500 auxiliary images
SEGMENT = ["--backbone", "resnet18", "--weights", "none", "--seed", "0", "--image-size", "128", "--workers", "0",
           "--batch-size", "32", "--dtype", "float32", "--device", "cpu"]
TRAIN = ["--epochs", "6", "--lr", "2e-3", "--val-every", "0", "--seed", "0", "--set", "task.val_beam=1",
         "--set", "model.graph_dim=64", "--set", "model.hidden_size=96", "--set", "model.embed_size=48",
         "--set", "model.attention_size=48", "--set", "model.pool_hidden=48", "--set", "model.dropout=0.0",
         "--set", "task.aux_batch_size=32", "--set", "task.max_words=32", "--device", "cpu"]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    out = tmp_path_factory.mktemp("l2c")
    world = out / "world"
    synth_world(world, 10, 400, 500)
    for name, images, masks in (("pairs", "pair_images.jsonl", "pair_masks"), ("aux", "aux_images.jsonl",
                                                                             "aux_masks")):
        run("segment-pool", str(world / images), "--masks", str(world / masks), *SEGMENT, "-o", str(out / f"{name}.h5"))
    pairs = world / "pairs.jsonl"
    run("train", "--model", "l2c", *TRAIN, str(pairs), str(out / "pairs.h5"), str(world / "aux_captions.jsonl"),
        str(out / "aux.h5"), "-o", str(out / "l2c.pt"))
    return out, pairs


def score(predictions, pairs) -> dict:
    return json.loads(run("score", "caption", str(predictions), "--refs", str(pairs), "--no-spice", "--no-meteor"))


def test_l2c_beats_most_frequent_and_text_only_on_rouge_l(pipeline):
    out, pairs = pipeline
    l2c = out / "l2c_test.jsonl"
    run("caption", "--pairs", str(pairs), "--split", "test", "--model", str(out / "l2c.pt"), str(out / "pairs.h5"),
        "--beam", "1", "--device", "cpu", "-o", str(l2c))
    descriptions = [json.loads(line)["caption"] for line in l2c.read_text().splitlines()]
    assert len(set(descriptions)) > 1
    ours = score(l2c, pairs)
    for kind in ("most-frequent", "text-only"):
        baseline = out / f"{kind}.jsonl"
        run("baseline", kind, str(pairs), "--split", "test", "-o", str(baseline))
        theirs = score(baseline, pairs)
        assert ours["ROUGE_L"] > theirs["ROUGE_L"] + 0.03, (kind, ours, theirs)

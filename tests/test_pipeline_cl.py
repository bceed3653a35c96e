"""End to end on the synthetic world (Dai & Lin): synth -> extract-regions (3x3 grid + average of the world's trained
ResNet-18, made once per test session) -> train AdaptiveAttention by MLE -> CL from it (the MLE model as frozen
reference) -> caption -> score.

The MLE captioner must beat the most-frequent-caption baseline on CIDEr-D (test split), and CL must move
self-retrieval the way the paper's Table 1 reports: the captions of the CL model find their own image better
(lower mean rank of the own image by log p(c | I) among the 60 test images) than the MLE model's. Both must write
distinct captions for the distinct test scenes. Measured (2026-11-28, `make test`, one thread a worker): MLE CIDEr-D
0.579 against 0.154 for the most frequent caption, CL self-retrieval R@1 43.3 -> 51.7 %, mean rank 2.45 -> 2.10
(chance 30.5). Before the captioners standardised their features (issue 39) the MLE model over the random ResNet-18
wrote 4 distinct captions for the 60 images (one of them for 42), CIDEr-D 0.209 and mean rank 29.5. The figures are
printed (pytest -s).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pipeline_fixtures import run, synth_world, trained_backbone

from vltools.eval.spread import caption_spread

pytestmark = pytest.mark.slow

IMAGES = 600
MLE_EPOCHS, CL_EPOCHS = "5", "2"
SIZES = ["--set", "model.embed_size=128", "--set", "model.hidden_size=128", "--set", "model.attention_size=64",
         "--set", "model.dropout=0.2"]
COMMON = ["--batch-size", "50", "--val-every", "0", "--seed", "0", "--set", "task.val_images=100", "--device", "cpu"]
MOST_FREQUENT = Path(__file__).resolve().parent.parent / "examples" / "cl" / "most_frequent.py"


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    weights = trained_backbone(tmp_path_factory)
    out = tmp_path_factory.mktemp("cl")
    world = out / "world"
    synth_world(world, IMAGES, 0, 0)
    features, captions = out / "features.h5", world / "captions.jsonl"
    run("extract-regions", world / "images.jsonl", "--regions", "grid", "--global", "avg", "--backbone", "resnet18",
        "--weights", weights, "--image-size", "96", "--workers", "0", "--batch-size", "32", "--dtype", "float32",
        "--device", "cpu", "-o", features)
    run("train", "--model", "adaptive-attention", *SIZES, *COMMON, "--epochs", MLE_EPOCHS, "--lr", "2e-3", features,
        captions, "-o", out / "mle.pt")
    run("train", "--model", "adaptive-attention", *COMMON, "--epochs", CL_EPOCHS, "--lr", "2e-4", "--objective", "cl",
        "--init", out / "mle.pt", "--reference", out / "mle.pt", features, captions, "-o", out / "cl.pt")
    results = {}
    for name in ("mle", "cl"):
        caps = out / f"{name}.caps.jsonl"
        run("caption", "--model", out / f"{name}.pt", features, captions, "--split", "test", "-o", caps)
        run("caption", "--logp", "--model", out / f"{name}.pt", features, caps, "-o", out / f"{name}.logp.h5")
        results[name] = {**json.loads(run("score", "caption", caps, "--refs", captions, "--no-spice")),
                         **json.loads(run("score", "self-retrieval", out / f"{name}.logp.h5")),
                         "captions": caps.read_text(encoding="utf-8")}
    baseline = subprocess.run([sys.executable, str(MOST_FREQUENT), str(captions)], capture_output=True, check=True)
    (out / "mostfreq.jsonl").write_bytes(baseline.stdout)
    results["mostfreq"] = json.loads(run("score", "caption", out / "mostfreq.jsonl", "--refs", captions, "--no-spice"))
    for name, values in results.items():
        print(name, {k: round(v, 3) for k, v in values.items() if isinstance(v, float)})
    return results


def test_mle_captioner_beats_the_most_frequent_caption(pipeline):
    assert pipeline["mle"]["CIDEr"] > 1.2 * pipeline["mostfreq"]["CIDEr"], pipeline


def test_both_captioners_tell_the_test_images_apart(pipeline):
    """At least a quarter of distinct captions and none for half of the images (each wrote one caption for all
    before issue 39), and CL changed the MLE model's captions."""
    assert pipeline["mle"]["captions"] != pipeline["cl"]["captions"]
    for name in ("mle", "cl"):
        spread = caption_spread(json.loads(line)["caption"] for line in pipeline[name]["captions"].splitlines())
        assert spread.items == IMAGES // 10 and spread.distinct >= spread.items / 4 and not spread.collapsed, \
            (name, spread)


def test_cl_improves_self_retrieval_as_in_table_1(pipeline):
    """The paper's claim (Table 1): CL's captions find their own image sooner (a lower mean rank of the own image)
    and first at least as often (R@1) as the MLE model's. Measured with the trained backbone: R@1 40.0 -> 58.3 and
    mean rank 2.55 -> 1.88 of 60 (two threads), 43.3 -> 51.7 and 2.45 -> 2.10 (one thread, as `make test` runs it).
    IL is not asserted: its measured direction followed the float rounding (R@1 +6.7, +0.0 and -8.3 in three runs);
    the recipe's table prints it on a direction line."""
    mle, cl = pipeline["mle"], pipeline["cl"]
    assert mle["n_images"] == cl["n_images"] == IMAGES // 10
    chance = (IMAGES // 10 + 1) / 2   # the mean rank of the own image among the test images at random
    assert cl["meanr"] < mle["meanr"] < chance / 2 and cl["R@1"] >= mle["R@1"], pipeline

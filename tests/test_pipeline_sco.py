"""End to end on the synthetic world: synth -> extract-regions --global tencrop (context) -> concepts -> train
--model concepts -> concept-scores -> train --model sco (ctx, cnp, cnp + ctx + gen) -> encode -> match -> score.

Every model must retrieve far above chance (mR at least 3 times chance mR); the full model (gated concepts and
context with generation) is compared with ctx and cnp alone on mR, and the comparison is reported as measured
(see examples/sco/README.md for what separates on the toy world)."""

from __future__ import annotations

import json

import pytest
from pipeline_fixtures import run, synth_world

pytestmark = pytest.mark.slow

IMAGES = 400
ROWS = {"ctx": ["--set", "model.use_concepts=false", "--set", "model.generation=false"],
        "cnp": ["--set", "model.use_context=false", "--set", "model.generation=false"],
        "cnp_ctx_gen": []}
TRAIN = ["--epochs", "20", "--batch-size", "128", "--lr", "2e-3", "--lr-update", "15", "--val-every", "0",
         "--seed", "0", "--set", "model.embed_size=128", "--set", "model.word_dim=64", "--device", "cpu"]


@pytest.fixture(scope="module")
def scores(tmp_path_factory):
    out = tmp_path_factory.mktemp("sco")
    world = out / "world"
    synth_world(world, IMAGES, 0, 0)
    images, captions = str(world / "images.jsonl"), str(world / "captions.jsonl")
    context, concepts, cnn, scores_h5 = (str(out / n) for n in ("ctx.h5", "concepts.json", "cnn.pt", "p.h5"))
    run("extract-regions", images, "--regions", "none", "--global", "tencrop", "--crop-size", "32", "--backbone",
        "resnet18", "--weights", "none", "--workers", "0", "--batch-size", "32", "--dtype", "float32", "--device",
        "cpu", "-o", context)
    run("concepts", captions, "-k", "64", "-o", concepts)
    run("train", "--model", "concepts", images, captions, concepts, "-o", cnn, "--epochs", "12", "--lr", "2e-3",
        "--lr-update", "8", "--seed", "0", "--device", "cpu", "--set", "task.image_size=48", "--set",
        "task.weights=none", "--set", "model.backbone=resnet18")
    run("concept-scores", images, "--model", cnn, "--levels", "1,2,3", "--image-size", "96", "--crop-size", "48",
        "--batch-size", "16", "--workers", "0", "--device", "cpu", "-o", scores_h5)
    results = {}
    for name, options in ROWS.items():
        model = str(out / f"{name}.pt")
        run("train", "--model", "sco", *TRAIN, *options, context, scores_h5, captions, "-o", model)
        run("encode", context, "--concepts", scores_h5, "--model", model, "--captions", captions, "--split", "test",
            "-o", str(out / f"{name}_img.h5"), "--device", "cpu")
        run("encode", captions, "--model", model, "--split", "test", "-o", str(out / f"{name}_cap.h5"),
            "--device", "cpu")
        run("match", str(out / f"{name}_img.h5"), str(out / f"{name}_cap.h5"), "--sims", str(out / f"{name}_sims.h5"),
            "-o", str(out / f"{name}.jsonl"))
        results[name] = json.loads(run("score", "retrieval", str(out / f"{name}_sims.h5")))
    return results


def mean_recall(result: dict) -> float:
    return sum(result[d][f"R@{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10)) / 6


@pytest.mark.parametrize("name", list(ROWS))
def test_every_row_far_above_chance(scores, name):
    result = scores[name]
    n = result["n_images"]
    chance = sum(100 * min(k, n) / n for k in (1, 5, 10)) / 3   # t2i chance; i2t chance is about the same
    assert result["n_captions"] == 5 * n
    assert mean_recall(result) >= 3 * chance, result


def test_full_model_beats_context_alone(scores):
    """Concepts from the trained CNN add to the random-CNN context on the toy world (colours and shapes)."""
    assert mean_recall(scores["cnp_ctx_gen"]) > mean_recall(scores["ctx"]), \
        {name: round(mean_recall(result), 1) for name, result in scores.items()}

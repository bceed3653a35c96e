"""End to end on the synthetic world (Gordo & Larlus): synth -> tfidf-proxy -> train rmac (untrained baseline and
(V, V)) -> encode -> match i2i -> score semantic. The trained model must beat the untrained one on NDCG AUC and
both must beat random rankings."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pipeline_fixtures import run, synth_world

from vltools.eval import semantic
from vltools.io import proxy as proxy_io
from vltools.io.sims import read_sims

pytestmark = pytest.mark.slow

IMAGES = 500
# the settings of examples/semantic/Makefile (DATA=synth)
COMMON = ["--batch-size", "16", "--seed", "0", "--device", "cpu", "--set", "model.backbone=resnet18",
          "--set", "model.scales=1.0", "--set", "task.weights=none", "--set", "task.calibrate_bn=true",
          "--set", "task.image_size=64", "--set", "task.queries=32", "--set", "task.relevant=4",
          "--set", "task.pool=200", "--set", "task.per_pair=10", "--set", "task.whiten_images=100",
          "--set", "task.val_queries=50", "--set", "task.cache_images=true", "--set", "task.margin=0.2"]
TRAINED = [*COMMON, "--epochs", "8", "--lr", "3e-4", "--set", "task.mine_every=4"]
UNTRAINED = [*COMMON, "--epochs", "1", "--lr", "0", "--set", "task.mine_every=1"]


@pytest.fixture(scope="module")
def scores(tmp_path_factory):
    out = tmp_path_factory.mktemp("semantic")
    world = out / "world"
    synth_world(world, IMAGES, 0, 0)
    images, proxy = str(world / "images.jsonl"), str(out / "proxy.h5")
    run("tfidf-proxy", str(world / "regions.jsonl"), "--images", images, "-o", proxy)
    results = {}
    for name, options in (("baseline", UNTRAINED), ("v", TRAINED)):
        checkpoint = str(out / f"{name}.pt")
        run("train", "--model", "rmac", *options, images, proxy, "-o", checkpoint)
        run("encode", "--model", checkpoint, images, "--proxy", proxy, "--split", "test", "--device", "cpu",
            "-o", str(out / f"{name}.h5"))
        run("match", str(out / f"{name}.h5"), str(out / f"{name}.h5"), "--sims", str(out / f"{name}_sims.h5"),
            "-o", str(out / f"{name}.jsonl"))
        results[name] = json.loads(run("score", "semantic", str(out / f"{name}_sims.h5"), "--proxy", proxy,
                                       "--triplets", str(world / "user_study.jsonl")))
    # Table 1's "human captions: tf-idf": the proxy's own similarities, scored as examples/semantic's oracle row
    results["oracle"] = json.loads(run("score", "semantic", proxy, "--proxy", proxy, "--split", "test",
                                       "--triplets", str(world / "user_study.jsonl")))
    sims = read_sims(out / "v_sims.h5")
    triplets = proxy_io.read_triplets(world / "user_study.jsonl")
    randoms = []
    for seed in range(5):
        sims.sims = np.random.default_rng(seed).random(sims.sims.shape)
        ndcg, pcc, kept = semantic.semantic_from_sims(sims, proxy_io.read_proxy(proxy), list(semantic.DEFAULT_R),
                                                      "random")
        sim_a, sim_b = semantic.triplet_sims_from_matrix(sims, triplets, "random")
        agreement = semantic.user_agreement(sim_a, sim_b, semantic.triplet_counts(triplets))[0]
        randoms.append((semantic.summarize_curves(ndcg, pcc, kept)["ndcg_auc"], agreement))
    results["random"] = {"ndcg_auc": float(np.mean([r[0] for r in randoms])),
                         "user_agreement": float(np.mean([r[1] for r in randoms]))}
    return results


def summary(scores: dict) -> str:
    return ", ".join(f"{name}: NDCG AUC {s['ndcg_auc']:.1f}, US {s['user_agreement']:.1f}"
                     for name, s in scores.items())


def test_trained_beats_untrained_and_both_beat_random(scores):
    # measured (seed 0): trained 53.6 / US 52.5, untrained 46.7 / US 42.0, random 40.3 NDCG AUC
    assert scores["v"]["ndcg_auc"] > scores["baseline"]["ndcg_auc"] + 2, summary(scores)
    assert scores["baseline"]["ndcg_auc"] > scores["random"]["ndcg_auc"] + 3, summary(scores)
    assert scores["v"]["user_agreement"] > scores["baseline"]["user_agreement"] + 3, summary(scores)
    assert scores["v"]["user_agreement"] > scores["random"]["user_agreement"], summary(scores)


def test_human_caption_tfidf_agrees_with_users_more_than_r_mac(scores):
    """Gordo & Larlus Table 1: the tf-idf of the human captions (76.3) is above the visual R-MAC baseline (64.0)."""
    assert scores["oracle"]["user_agreement"] > scores["baseline"]["user_agreement"] + 3, summary(scores)

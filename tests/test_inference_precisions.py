"""Inference, not only training, in every `--precision` the command line accepts, on the CPU, for every model family:
each gives finite results (issue 48 item 3: SGR and SAF gave NaN for every pair of an image with padded regions
under fp16). Tiny random models; the worlds of the family's own tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from l2c_helpers import IMAGE_A, IMAGE_B, PAIR_VOCAB, random_l2c
from matching_helpers import VOCAB, make_world, save_tiny
from PIL import Image
from test_encode_cli import CTX_SEN, GENERATED
from tiny_captioning import make_caption_world, overflowing_captioner, save_captioner

import vltools
from vltools.cli import cli
from vltools.data.l2c import FeatureMaps
from vltools.devices import PRECISIONS, autocast
from vltools.errors import VLToolsError
from vltools.infer.pairs import describe_batches
from vltools.io.checkpoints import save_checkpoint
from vltools.io.features import FeaturesReader, FeaturesWriter
from vltools.models import build_model, default_config
from vltools.models.concepts import build_concept_cnn


@pytest.fixture(scope="module")
def matching(tmp_path_factory):
    """The matching world (some images with padded regions) and a checkpoint of each matching family."""
    folder = tmp_path_factory.mktemp("matching")
    features, captions = make_world(folder, ragged=True)
    return features, captions, {name: save_tiny(folder / f"{name}.pt", name, seed)
                                for seed, name in enumerate(("vse", "sgr", "saf"))}


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    """Three random 32 x 40 photos and the images JSONL naming them."""
    folder = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    lines = []
    for i in range(3):
        Image.fromarray(rng.integers(0, 255, (32, 40, 3), dtype=np.uint8)).save(folder / f"{i}.png")
        lines.append(json.dumps({"image_id": f"im{i}", "path": f"{i}.png", "split": "test"}))
    (folder / "images.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder / "images.jsonl"


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("members", [("sgr",), ("saf",), ("sgr", "saf"), ("vse",)], ids="+".join)
def test_match_gives_finite_similarities(matching, members, precision):
    features, captions, models = matching
    found = vltools.match(features, captions, [models[name] for name in members], device="cpu", precision=precision,
                          block_images=3, block_captions=5)
    assert found.sims.shape == (7, 21) and np.isfinite(found.sims).all()
    assert np.isfinite(found.forward[0]).all() and np.isfinite(found.backward[0]).all()


@pytest.mark.parametrize("precision", PRECISIONS)
def test_rerank_gives_finite_similarities(matching, precision):
    features, captions, models = matching
    found = vltools.match(features, captions, models["sgr"], device="cpu", precision=precision, rerank_k=4,
                          first_stage=models["vse"])
    assert np.isfinite(found.forward[0]).all() and np.isfinite(found.backward[0]).all()


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("side", ["images", "captions"])
def test_encode_gives_finite_embeddings(matching, side, precision):
    features, captions, models = matching
    found = vltools.encode(features if side == "images" else captions, models["vse"], device="cpu",
                           precision=precision)
    assert found.side == side and len(found.vectors) and np.isfinite(found.vectors).all()


@pytest.mark.parametrize("precision", PRECISIONS)
def test_sco_encode_gives_finite_embeddings(tmp_path, precision):
    """SCO's "ctx + sen" images (a context vector and each image's generated sentence) and its captions."""
    context = np.random.default_rng(3).normal(size=(3, 4)).astype(np.float32)
    with FeaturesWriter(tmp_path / "context.h5", {"global": "tencrop"}, dtype="float32") as writer:
        writer.add(list(GENERATED), **{"global": context})
    torch.manual_seed(4)
    save_checkpoint(tmp_path / "sco.pt", "sco", {**default_config("sco"), **CTX_SEN},
                    build_model("sco", CTX_SEN, len(VOCAB)).state_dict(), vocab=VOCAB, schema=1)
    sentences = [{"image_id": i, "caption": c} for i, c in GENERATED.items()]
    found = [vltools.encode(tmp_path / "context.h5", tmp_path / "sco.pt", sentences=sentences, device="cpu",
                            precision=precision),
             vltools.encode([{**record, "split": "test"} for record in sentences], tmp_path / "sco.pt",
                            device="cpu", precision=precision)]
    assert [len(item.vectors) for item in found] == [3, 3] and all(np.isfinite(i.vectors).all() for i in found)


@pytest.mark.slow
@pytest.mark.parametrize("precision", PRECISIONS)
def test_rmac_encode_gives_finite_embeddings(images, tmp_path, precision):
    torch.manual_seed(0)
    config = {"backbone": "resnet18", "levels": 2, "scales": "1.0", "text": False, "frozen_bn": True}
    save_checkpoint(tmp_path / "rmac.pt", "rmac", config, build_model("rmac", config, 2).state_dict(),
                    vocab=["a", "photo"], train_state={"config": {"task": {"image_size": 32}}}, schema=1)
    found = vltools.encode(images, tmp_path / "rmac.pt", device="cpu", precision=precision, workers=0)
    assert len(found.vectors) == 3 and np.isfinite(found.vectors).all()
    if precision == "bf16":     # computed in bf16, not in fp32 whatever the precision (as it was)
        full = vltools.encode(images, tmp_path / "rmac.pt", device="cpu", precision="fp32", workers=0)
        assert not np.array_equal(found.vectors, full.vectors)
        np.testing.assert_allclose(found.vectors, full.vectors, atol=0.05)


@pytest.mark.slow
@pytest.mark.parametrize("precision", PRECISIONS)
def test_concept_scores_are_finite(images, tmp_path, precision):
    torch.manual_seed(0)
    model, _ = build_concept_cnn("resnet18", "none", 4)
    save_checkpoint(tmp_path / "cnn.pt", "concepts", {"backbone": "resnet18", "num_concepts": 4},
                    model.state_dict(), vocab=["red", "blue", "star", "two"], schema=1)
    result = CliRunner().invoke(cli, ["--quiet", "concept-scores", str(images), "--model", str(tmp_path / "cnn.pt"),
                                      "--levels", "1", "--image-size", "32", "--crop-size", "16", "--workers", "0",
                                      "--device", "cpu", "--precision", precision, "-o", str(tmp_path / "s.h5")],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    with FeaturesReader(tmp_path / "s.h5") as reader:
        scores = reader.read(reader.ids, ["global"])["global"]
    assert scores.shape == (3, 4) and np.isfinite(scores).all()


@pytest.fixture(scope="module")
def captioning(tmp_path_factory):
    folder = tmp_path_factory.mktemp("captioning")
    features, captions = make_caption_world(folder)
    return folder, features, captions


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name, seed", [("adaptive-attention", 0), ("neuraltalk2", 2)])
def test_captioners_caption_every_image(captioning, name, seed, precision):
    """Beam search over NaN log-probabilities ends every caption at once (refused: every caption empty)."""
    folder, features, captions = captioning
    checkpoint = save_captioner(folder / f"{name}.pt", name, captions, seed=seed)
    found = vltools.caption(checkpoint, features, captions, split="test", device="cpu", precision=precision,
                            batch_size=4)
    assert len(found) == 10 and all(record["caption"] for record in found)


def test_a_captioner_s_nan_log_probabilities_are_one_line_naming_the_precision(captioning, tmp_path):
    """Beam search over NaN log-probabilities gave captions without a word (empty ones only when all were)."""
    folder, features, captions = captioning
    checkpoint = overflowing_captioner(save_captioner(tmp_path / "nt.pt", "neuraltalk2", captions),
                                       tmp_path / "overflowing.pt")
    with pytest.raises(VLToolsError, match=r"^image id '[^']+': the model gave NaN or infinite caption "
                                           r"log-probabilities under precision=fp16; run with precision=fp32"):
        vltools.caption(checkpoint, features, captions, split="test", device="cpu", precision="fp16", batch_size=4)


@pytest.fixture(scope="module")
def l2c(tmp_path_factory):
    return random_l2c(tmp_path_factory.mktemp("l2c"))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_l2c_describes_every_pair_with_finite_log_probabilities(l2c, precision):
    """L2C, the last family: its descriptions under the autocast `vltools caption --pairs` runs them in."""
    maps, model = l2c
    with autocast(torch.device("cpu"), precision):
        batches = list(describe_batches(model, FeatureMaps(maps), IMAGE_A, IMAGE_B, PAIR_VOCAB, batch_size=3))
    assert sum(len(texts) for texts, _ in batches) == len(IMAGE_A)
    assert all(np.isfinite(logprob).all() for _, logprob in batches)

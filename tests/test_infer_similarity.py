"""Blocked similarity: equal to one unblocked model.similarity call, for any block sizes, ensembles and caches."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from matching_helpers import VOCAB, make_world, record_moves, tiny_model

from vltools.data.blocks import CaptionBlocks, FeatureBlocks
from vltools.errors import VLToolsError
from vltools.infer.similarity import similarity_blocks
from vltools.io.features import FeaturesReader
from vltools.io.records import read_records
from vltools.text.captions import pad_tokens
from vltools.text.vocab import Vocabulary


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("world")
    features, captions = make_world(folder, n_images=7, per_image=3)
    records = [r for r in read_records(captions, "captions") if r["split"] == "test"]
    vocab = Vocabulary(VOCAB)
    tokens = [vocab.encode(r["caption"]) for r in records]
    image_ids = list(dict.fromkeys(r["image_id"] for r in records))
    return features, image_ids, tokens


def reference(model, features, image_ids, tokens) -> np.ndarray:
    """One unblocked call: every image and every caption encoded together."""
    with FeaturesReader(features) as reader:
        arrays = reader.read(image_ids, ["regions", "num_regions"])
    padded, lengths = pad_tokens(tokens)
    with torch.inference_mode():
        img = model.encode_images(torch.from_numpy(arrays["regions"]), torch.from_numpy(arrays["num_regions"]).long())
        cap = model.encode_captions(padded, lengths)
        return model.similarity(img, cap, lengths).numpy()


@pytest.mark.parametrize("name", ["sgr", "saf", "vse"])
@pytest.mark.parametrize("batch_images,batch_captions", [(1, 8), (3, 4), (2, 5), (100, 100)])
def test_blocks_equal_unblocked(world, name, batch_images, batch_captions):
    features, image_ids, tokens = world
    model = tiny_model(name, seed=3)
    expected = reference(model, features, image_ids, tokens)
    with FeaturesReader(features) as reader:
        sims = similarity_blocks(model, FeatureBlocks(reader, image_ids, batch_images),
                                 CaptionBlocks(tokens, batch_captions))
    assert sims.shape == (7, 21)
    np.testing.assert_allclose(sims.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_models_are_moved_to_the_device_given(world, monkeypatch):
    """A model left on the CPU and given device="cuda" once failed on a device mismatch: each model is moved."""
    features, image_ids, tokens = world
    sgr, saf = tiny_model("sgr", seed=1), tiny_model("saf", seed=2)
    moves = [record_moves(model, monkeypatch) for model in (sgr, saf)]
    with FeaturesReader(features) as reader:
        similarity_blocks([sgr, saf], FeatureBlocks(reader, image_ids, 3), CaptionBlocks(tokens, 8), device="cpu")
    assert moves == [[torch.device("cpu")]] * 2


def test_ensemble_is_mean_and_cache_budget_does_not_change_result(world):
    features, image_ids, tokens = world
    sgr, saf = tiny_model("sgr", seed=1), tiny_model("saf", seed=2)
    expected = (reference(sgr, features, image_ids, tokens) + reference(saf, features, image_ids, tokens)) / 2
    with FeaturesReader(features) as reader:
        for cache_mb in (0.0, 1e-3, 2048.0):
            sims = similarity_blocks([sgr, saf], FeatureBlocks(reader, image_ids, 3), CaptionBlocks(tokens, 8),
                                     image_cache_mb=cache_mb)
            np.testing.assert_allclose(sims.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_global_vectors_once_per_block(world, monkeypatch):
    # caption globals once per caption block (not once per image block), image globals once per cached image block
    features, image_ids, tokens = world
    model = tiny_model("sgr", seed=6)
    expected = reference(model, features, image_ids, tokens)
    calls = {"images": 0, "captions": 0}
    for side in calls:
        method = getattr(model, f"global_{side}")

        def counted(*args, side=side, method=method):
            calls[side] += 1
            return method(*args)

        monkeypatch.setattr(model, f"global_{side}", counted)
    with FeaturesReader(features) as reader:
        sims = similarity_blocks(model, FeatureBlocks(reader, image_ids, 3), CaptionBlocks(tokens, 8))
    assert calls == {"images": 3, "captions": 3}                  # 3 image blocks (cached), 3 caption blocks
    np.testing.assert_allclose(sims.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_in_memory_blocks_and_training_mode_restored(world):
    features, image_ids, tokens = world
    model = tiny_model("sgr", seed=4)
    expected = reference(model, features, image_ids, tokens)
    model.train()
    with FeaturesReader(features) as reader:
        images = list(FeatureBlocks(reader, image_ids, 4))
    sims = similarity_blocks(model, images, [pad_tokens(tokens[:10]), pad_tokens(tokens[10:])])
    assert model.training
    np.testing.assert_allclose(sims.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_bf16_is_close_to_fp32(world):
    features, image_ids, tokens = world
    model = tiny_model("sgr", seed=5)
    with FeaturesReader(features) as reader:
        exact = similarity_blocks(model, FeatureBlocks(reader, image_ids, 4), CaptionBlocks(tokens, 8))
        low = similarity_blocks(model, FeatureBlocks(reader, image_ids, 4), CaptionBlocks(tokens, 8),
                                precision="bf16")
    assert low.dtype == torch.float32
    assert float((low - exact).abs().max()) < 0.05


def test_unknown_image_id_is_named(world):
    features, _, _ = world
    with FeaturesReader(features) as reader, pytest.raises(VLToolsError, match="'nope'"):
        FeatureBlocks(reader, ["img0", "nope"], 2)

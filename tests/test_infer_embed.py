"""Standalone embeddings: only separable models have them; blocked embedding equals encoding each input alone;
the full similarity of two embedding sets equals one matrix product whatever the row block."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch
from matching_helpers import record_moves

from vltools.data.blocks import CaptionBlocks, FeatureBlocks
from vltools.errors import VLToolsError
from vltools.infer.embed import embed_all, embed_blocks, full_sims, require_separable
from vltools.io.features import FeaturesReader, FeaturesWriter
from vltools.models import build_model

VOCAB_SIZE, K, D, E = 12, 3, 4, 6
VSE_CONFIG = {"img_dim": D, "embed_size": E, "word_dim": 5, "dropout": 0.5}
SGR_CONFIG = {"img_dim": D, "embed_size": 8, "word_dim": 5, "sim_dim": 4, "num_regions": K, "sgr_step": 1}
CPU = torch.device("cpu")
TOKENS = [[1, 5, 2], [1, 4, 6, 7, 2], [1, 2], [1, 8, 8, 9, 10, 2], [1, 11, 2]]
COUNTS = [3, 1, 2, 3, 2, 1, 3]


def tiny(name: str, config: dict, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(name, config, VOCAB_SIZE).eval()


@pytest.fixture(scope="module")
def features(tmp_path_factory):
    """7 images with ragged region counts; the padding rows hold large values, so that ignoring the counts shows."""
    rng = np.random.default_rng(0)
    regions = rng.normal(size=(len(COUNTS), K, D)).astype(np.float32)
    for row, count in enumerate(COUNTS):
        regions[row, count:] = 50.0
    path = tmp_path_factory.mktemp("embed") / "feats.h5"
    ids = [f"i{n}" for n in range(len(COUNTS))]
    with FeaturesWriter(path, {}, dtype="float32") as writer:
        writer.add(ids, regions=regions, num_regions=np.array(COUNTS, dtype=np.int32))
    return path, ids, regions


def test_require_separable_refuses_a_cross_attention_model_naming_the_source():
    with pytest.raises(VLToolsError) as caught:
        require_separable(tiny("sgr", SGR_CONFIG), "sgr", "runs/sgr.pt")
    message = str(caught.value)
    assert message.startswith("runs/sgr.pt: model 'sgr' is a cross-attention model")
    assert "\n" not in message


def test_require_separable_accepts_vse_and_refuses_a_module_that_does_not_say():
    require_separable(tiny("vse", VSE_CONFIG), "vse", "vse.pt")
    with pytest.raises(VLToolsError, match="^plain.pt: model 'linear'"):
        require_separable(torch.nn.Linear(2, 2), "linear", "plain.pt")


def test_image_embeddings_equal_encoding_each_image_alone(features):
    path, ids, regions = features
    model = tiny("vse", VSE_CONFIG, seed=1)
    order = [ids[n] for n in (6, 2, 0, 5, 1, 3, 4)]
    with FeaturesReader(path) as reader:
        got = embed_all(model, FeatureBlocks(reader, order, 3), "images", CPU)
    with torch.no_grad():
        expected = np.concatenate([model.encode_images(torch.from_numpy(regions[n:n + 1, :COUNTS[n]])).numpy()
                                   for n in (6, 2, 0, 5, 1, 3, 4)])
    assert got.dtype == np.float32 and got.shape == (7, E)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)


def test_caption_embeddings_equal_encoding_each_caption_alone():
    model = tiny("vse", VSE_CONFIG, seed=2)
    got = embed_all(model, CaptionBlocks(TOKENS, 2), "captions", CPU)
    with torch.no_grad():
        expected = np.concatenate([model.encode_captions(torch.tensor([t]), torch.tensor([len(t)])).numpy()
                                   for t in TOKENS])
    assert got.dtype == np.float32 and got.shape == (len(TOKENS), E)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_embed_blocks_yields_one_array_per_block_in_eval_mode_and_restores_training():
    model = tiny("vse", VSE_CONFIG, seed=3)
    with torch.no_grad():
        expected = [model.encode_captions(*CaptionBlocks(TOKENS, 2)[n]).numpy() for n in range(3)]
    model.train()    # dropout 0.5 on the words: a training-mode pass would differ
    got = list(embed_blocks(model, CaptionBlocks(TOKENS, 2), "captions", CPU))
    assert model.training
    assert [block.shape for block in got] == [(2, E), (2, E), (1, E)]
    for block, want in zip(got, expected, strict=True):
        np.testing.assert_allclose(block, want, rtol=1e-5, atol=1e-6)


def test_the_model_is_moved_to_the_device_given(monkeypatch):
    model = tiny("vse", VSE_CONFIG)
    moved = record_moves(model, monkeypatch)
    embed_all(model, CaptionBlocks(TOKENS, 2), "captions", CPU)
    assert moved == [CPU]


def test_unknown_side_is_refused():
    with pytest.raises(ValueError, match="side must be one of"):
        list(embed_blocks(tiny("vse", VSE_CONFIG), CaptionBlocks(TOKENS, 2), "texts", CPU))


@pytest.mark.parametrize("block", [1, 3, 4, 10, 4096])
def test_full_sims_equals_one_matrix_product(block):
    rng = np.random.default_rng(block)
    rows = rng.normal(size=(10, 5)).astype(np.float32)
    columns = rng.normal(size=(7, 5)).astype(np.float32)
    got = full_sims(rows, columns, block=block)
    assert got.shape == (10, 7) and got.dtype == np.float32
    np.testing.assert_allclose(got, rows.astype(np.float64) @ columns.T.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_full_sims_reads_hdf5_datasets_in_blocks(tmp_path):
    rng = np.random.default_rng(7)
    rows = rng.normal(size=(9, 4)).astype(np.float16)
    columns = rng.normal(size=(5, 4)).astype(np.float32)
    with h5py.File(tmp_path / "emb.h5", "w") as handle:
        handle["rows"], handle["columns"] = rows, columns
    with h5py.File(tmp_path / "emb.h5", "r") as handle:
        got = full_sims(handle["rows"], handle["columns"], block=2)
    expected = rows.astype(np.float64) @ columns.T.astype(np.float64)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)

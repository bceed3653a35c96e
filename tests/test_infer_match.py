"""infer/match.py: the mode follows the files, what each mode keeps, and the refusals in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from matching_helpers import make_world, save_overflowing, save_tiny

from vltools.errors import VLToolsError
from vltools.infer.loader import load_model
from vltools.infer.match import Search, check_index, input_kind, match_embeddings, match_features
from vltools.io.embeddings import write_embeddings
from vltools.io.sims import write_sims
from vltools.stages.match import match as stage_match


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("matchworld")
    features, captions = make_world(folder)
    return folder, features, captions, load_model(save_tiny(folder / "vse.pt", "vse", 3))


def test_input_kind_follows_the_file_and_refuses_models_for_scored_inputs(world, tmp_path):
    _, features, _, _ = world
    sims = tmp_path / "s.h5"
    write_sims(sims, np.zeros((2, 3), np.float32), ["a", "b"], ["x", "y", "z"], ["a", "a", "b"])
    assert input_kind(sims, False) == "sims" and input_kind(features, True) == "features"
    with pytest.raises(VLToolsError, match="already scored; drop model/rerank_k"):
        input_kind(sims, True)
    with pytest.raises(VLToolsError, match="already scored"):
        input_kind(sims, False, rerank_k=5)
    with pytest.raises(VLToolsError, match="no model given"):
        input_kind(features, False)


def test_full_keeps_the_matrix_and_rerank_refuses_it(world):
    _, features, captions, vse = world
    kept = match_features(features, captions, [vse], full=True)
    lean = match_features(features, captions, [vse], search_options=Search(top_k=2))
    assert kept.sims.shape == (7, 21) and lean.sims is None
    np.testing.assert_array_equal(lean.forward[1], np.argsort(-kept.sims, axis=1, kind="stable")[:, :2])
    with pytest.raises(VLToolsError, match="--sims needs every pair scored"):
        match_features(features, captions, [vse], full=True, rerank_k=3, first_stage=vse)
    with pytest.raises(VLToolsError, match="rerank_k=K needs first_stage=VSE.pt"):
        match_features(features, captions, [vse], rerank_k=3)


def test_two_image_sets_rank_images_for_images_without_the_query(tmp_path):
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(6, 4)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    ids = [f"i{n}" for n in range(6)]
    attrs = {"model": "rmac", "checkpoint_digest": "d", "side": "images"}
    write_embeddings(tmp_path / "q.h5", ids[:3], [emb[:3]], attrs)
    write_embeddings(tmp_path / "db.h5", ids, [emb], attrs)
    found = match_embeddings(tmp_path / "q.h5", tmp_path / "db.h5", Search(top_k=5), full=True)
    records = list(found.rankings())
    assert found.direction == "i2i" and found.backward is None and len(records) == 3
    for query, record in zip(ids[:3], records, strict=True):
        assert record["direction"] == "i2i" and query not in record["ids"] and len(record["ids"]) == 5
    np.testing.assert_allclose(found.sims, emb[:3] @ emb.T, rtol=1e-6, atol=1e-6)  # float32 sums: order varies


def test_an_index_is_kept_only_where_it_searches_embeddings(world, tmp_path):
    folder, features, captions, vse = world
    sgr = load_model(save_tiny(tmp_path / "sgr.pt", "sgr"))
    for kind, models, rerank_k in [("embeddings", [], None), ("features", [sgr], 5), ("features", [vse], 5)]:
        check_index(kind, "IVF16,Flat", models, rerank_k)            # searched: the embeddings, the first stage
    for kind, models in [("features", [sgr]), ("features", [vse]), ("features", [vse, sgr]), ("sims", [])]:
        check_index(kind, "exact", models)
    with pytest.raises(VLToolsError, match=r"^index=Flat: .*sgr.pt holds a cross-attention model \(sgr\)"):
        check_index("features", "Flat", [vse, sgr])
    with pytest.raises(VLToolsError, match="^index=Flat: without rerank_k every pair is scored exactly"):
        check_index("features", "Flat", [vse])
    with pytest.raises(VLToolsError, match="^index=Flat: the similarity matrices are already scored"):
        check_index("sims", "Flat")
    with pytest.raises(VLToolsError, match="cross-attention"):
        stage_match(features, captions, [sgr], index="Flat")


def test_an_embeddings_file_after_features_says_what_each_input_takes(tmp_path):
    """It was read as captions and called 'not UTF-8 text'."""
    features, _ = make_world(tmp_path)
    write_embeddings(tmp_path / "emb.h5", ["a#0"], [np.ones((1, 2), np.float32)], {"side": "captions"})
    with pytest.raises(VLToolsError, match=rf"^{tmp_path}/emb.h5: an HDF5 embeddings file, but after the features "
                                           rf"{features} match takes captions JSON lines \(scored by model\); to "
                                           "match embeddings, give image embeddings first"):
        match_features(features, tmp_path / "emb.h5", [])


@pytest.mark.parametrize("rerank", [False, True])
def test_non_finite_similarities_are_one_line_naming_the_precision_and_leave_no_autocast_on(world, rerank):
    """Issue 48 item 3: the API returned a Matches of NaN similarities without a word. Under fp16 a model whose
    products overflow float16 is refused naming the caption (or, reranked, the image) and precision=fp32; bf16 runs;
    and the refusal leaves this thread out of autocast."""
    folder, features, captions, vse = world
    model = load_model(save_overflowing(folder / "overflowing.pt", "sgr"))
    first = {"rerank_k": 4, "first_stage": vse} if rerank else {}
    with pytest.raises(VLToolsError) as error:
        match_features(features, captions, [model], search_options=Search(precision="fp16"), **first)
    assert not torch.is_autocast_enabled("cpu")
    kind = "image id 'img0'" if rerank else "caption id 'img0#0'"
    assert str(error.value) == (f"{kind}: the model gave NaN or infinite similarities under precision=fp16; run "
                                "with precision=fp32 (or bf16, which keeps float32's range)")
    found = match_features(features, captions, [model], search_options=Search(precision="bf16"), **first)
    assert np.isfinite(found.forward[0]).all()

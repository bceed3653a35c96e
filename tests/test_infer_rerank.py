"""Two-stage reranking: with K = everything it equals the full match; with small K only candidates are scored."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from matching_helpers import VOCAB, make_world, record_moves, tiny_model
from torch import nn

from vltools.data.blocks import CaptionBlocks, FeatureBlocks
from vltools.infer.embed import embed_all
from vltools.infer.rerank import FirstStage, candidates, rerank, rerank_candidates, rerank_direction
from vltools.infer.similarity import similarity_blocks
from vltools.infer.topk import topk_rows
from vltools.io.features import FeaturesReader
from vltools.io.records import read_records
from vltools.text.vocab import Vocabulary


class Counting(nn.Module):
    """Delegates to a model and counts the image-caption pairs its similarity scores."""

    separable = False

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.pairs = 0

    def encode_images(self, regions, num_regions):
        return self.model.encode_images(regions, num_regions)

    def encode_captions(self, tokens, lengths):
        return self.model.encode_captions(tokens, lengths)

    def similarity(self, img, cap, lengths):
        self.pairs += img.shape[0] * cap.shape[0]
        return self.model.similarity(img, cap, lengths)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    features, captions = make_world(tmp_path_factory.mktemp("world"), n_images=6, per_image=3)
    records = [r for r in read_records(captions, "captions") if r["split"] == "test"]
    vocab = Vocabulary(VOCAB)
    return features, list(dict.fromkeys(r["image_id"] for r in records)), [vocab.encode(r["caption"]) for r in records]


def test_rerank_of_everything_equals_full_match(world):
    features, image_ids, tokens = world
    sgr, saf, vse = tiny_model("sgr", 1), tiny_model("saf", 2), tiny_model("vse", 3)
    with FeaturesReader(features) as reader:
        images = FeatureBlocks(reader, image_ids, 4)
        captions = CaptionBlocks(tokens, 7)
        full = similarity_blocks([sgr, saf], images, captions)
        (i2t_values, i2t_indices), (t2i_values, t2i_indices) = rerank(
            [sgr, saf], FirstStage(vse, captions), images, captions, k_candidates=18, top_k=5,
            device=torch.device("cpu"))
    want_values, want_indices = topk_rows(full, 5)
    np.testing.assert_array_equal(i2t_indices, want_indices.numpy())
    np.testing.assert_allclose(i2t_values, want_values.numpy(), rtol=1e-5, atol=1e-6)
    want_values, want_indices = topk_rows(full.T.contiguous(), 5)
    np.testing.assert_array_equal(t2i_indices, want_indices.numpy())
    np.testing.assert_allclose(t2i_values, want_values.numpy(), rtol=1e-5, atol=1e-6)


def test_first_stage_and_rerankers_are_moved_to_the_device_given(world, monkeypatch):
    features, image_ids, tokens = world
    sgr, vse = tiny_model("sgr", 1), tiny_model("vse", 3)
    reranker, first = record_moves(sgr, monkeypatch), record_moves(vse, monkeypatch)
    with FeaturesReader(features) as reader:
        images, captions = FeatureBlocks(reader, image_ids, 4), CaptionBlocks(tokens, 7)
        rerank(sgr, FirstStage(vse, captions), images, captions, k_candidates=3, top_k=2, device=torch.device("cpu"))
    assert reranker and first and set(reranker + first) == {torch.device("cpu")}


def test_small_k_scores_only_the_candidates(world):
    features, image_ids, tokens = world
    sgr, vse = tiny_model("sgr", 1), tiny_model("vse", 3)
    counting = Counting(sgr)
    k = 3
    with FeaturesReader(features) as reader:
        images = FeatureBlocks(reader, image_ids, 4)
        captions = CaptionBlocks(tokens, 5)
        full = similarity_blocks(sgr, images, captions).numpy()
        img = embed_all(vse, images, "images", torch.device("cpu"))
        cap = embed_all(vse, captions, "captions", torch.device("cpu"))
        (i2t_values, i2t_indices), (t2i_values, t2i_indices) = rerank(
            counting, FirstStage(vse, captions), images, captions, k_candidates=k, top_k=2,
            device=torch.device("cpu"))
    assert counting.pairs == (len(image_ids) + len(tokens)) * k
    first = img @ cap.T
    for query, (values, indices) in enumerate(zip(i2t_values, i2t_indices, strict=True)):
        proposed = np.argsort(-first[query])[:k]
        assert set(indices) <= set(proposed)
        best = proposed[np.argsort(-full[query, proposed])][:2]
        np.testing.assert_array_equal(indices, best)
        np.testing.assert_allclose(values, full[query, best], rtol=1e-5)
    for query, indices in enumerate(t2i_indices):
        proposed = np.argsort(-first[:, query])[:k]
        np.testing.assert_array_equal(indices, proposed[np.argsort(-full[proposed, query])][:2])


def test_a_query_subset_reranks_as_the_full_run_does(world):
    features, image_ids, tokens = world
    sgr, saf, vse = tiny_model("sgr", 1), tiny_model("saf", 2), tiny_model("vse", 3)
    image_queries, caption_queries = np.array([4, 1]), np.array([0, 17, 5, 9])
    cpu = torch.device("cpu")
    with FeaturesReader(features) as reader:
        images = FeatureBlocks(reader, image_ids, 4)
        captions = CaptionBlocks(tokens, 7)
        proposals = candidates(FirstStage(vse, captions), images, 4, cpu)
        full_i2t, full_t2i = rerank_candidates([sgr, saf], images, captions, proposals, 3, cpu)
        part_i2t, part_t2i = rerank_candidates([sgr, saf], images, captions, proposals, 3, cpu,
                                               image_queries=image_queries, caption_queries=caption_queries)
    assert part_i2t[1].shape == (2, 3) and part_t2i[1].shape == (4, 3)
    for (part_values, part_indices), (full_values, full_indices), queries in (
            (part_i2t, full_i2t, image_queries), (part_t2i, full_t2i, caption_queries)):
        np.testing.assert_array_equal(part_indices, full_indices[queries])
        np.testing.assert_allclose(part_values, full_values[queries], rtol=1e-6)


class CountingEncodes(Counting):
    """Also counts the captions and images encoded."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model)
        self.encoded = {"images": 0, "captions": 0}

    def encode_images(self, regions, num_regions):
        self.encoded["images"] += len(regions)
        return super().encode_images(regions, num_regions)

    def encode_captions(self, tokens, lengths):
        self.encoded["captions"] += len(tokens)
        return super().encode_captions(tokens, lengths)


@pytest.mark.parametrize("cache_mb", [0.0, 64.0])
def test_candidates_are_encoded_once_within_the_cache_budget(world, cache_mb):
    features, image_ids, tokens = world
    counting = CountingEncodes(tiny_model("sgr", 1))
    # every caption query proposes all 6 images, one query per block: 18 blocks reuse the same 6 candidates
    proposals = np.tile(np.arange(len(image_ids)), (len(tokens), 1))
    with FeaturesReader(features) as reader:
        images = FeatureBlocks(reader, image_ids, 4)
        captions = CaptionBlocks(tokens, 5)
        full = similarity_blocks(counting.model, images, captions).numpy()
        with torch.inference_mode():
            values, indices = rerank_direction([counting], images, captions, proposals, 3, "captions",
                                               torch.device("cpu"), items_per_block=6, cache_mb=cache_mb)
    assert counting.encoded["captions"] == len(tokens)
    assert counting.encoded["images"] == (len(image_ids) if cache_mb else len(image_ids) * len(tokens))
    for query in range(len(tokens)):
        best = np.argsort(-full[:, query])[:3]
        np.testing.assert_array_equal(indices[query], best)
        np.testing.assert_allclose(values[query], full[best, query], rtol=1e-5, atol=1e-6)


def test_a_block_of_queries_without_any_candidate_is_left_empty(world):
    """An approximate first stage may find nothing for some queries (-1 rows): a block of only those is skipped
    (it was pad_sequence's RuntimeError on an empty list), the others are reranked as usual."""
    features, image_ids, tokens = world
    sgr = tiny_model("sgr", 1)
    proposals = np.tile(np.arange(3), (len(tokens), 1))
    proposals[:4] = -1
    with FeaturesReader(features) as reader:
        images = FeatureBlocks(reader, image_ids, 4)
        captions = CaptionBlocks(tokens, 5)
        full = similarity_blocks(sgr, images, captions).numpy()
        with torch.inference_mode():
            values, indices = rerank_direction([sgr], images, captions, proposals, 2, "captions",
                                               torch.device("cpu"), items_per_block=6)
    assert (indices[:4] == -1).all() and np.isneginf(values[:4]).all()
    for query in range(4, len(tokens)):
        np.testing.assert_array_equal(indices[query], np.argsort(-full[:3, query])[:2])

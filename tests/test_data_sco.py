"""SCO's inputs: caption tokens cut to J words, the /global checks of the context and concept-scores files, image
vectors read by id in any order, blocks, the per-caption dataset and its collate, and which files a model reads."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vltools.data.captions import CaptionSplit
from vltools.data.sco import (
    GeneratedSentences,
    ImageVectors,
    SCODataset,
    VectorBlocks,
    check_global,
    check_split_images,
    collate_sco,
    model_vectors,
    sco_tokens,
)
from vltools.errors import VLToolsError
from vltools.io.features import FeaturesWriter
from vltools.io.held import FeaturesInMemory
from vltools.text.vocab import SPECIALS, Vocabulary

IDS = ["im0", "im1", "im2", "im3"]
VOCAB = Vocabulary([*SPECIALS, "a", "red", "dog", "runs", "fast"])  # a=4 red=5 dog=6 runs=7 fast=8


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """ctx.h5 (I = 3, /global "tencrop"), cnp.h5 (K = 2, /global "concepts"), regions.h5 (no /global)."""
    folder = tmp_path_factory.mktemp("sco")
    context = np.arange(12, dtype=np.float32).reshape(4, 3)           # row i: 3i, 3i+1, 3i+2
    concepts = np.array([[0.1, 0.9], [0.2, 0.8], [0.3, 0.7], [0.4, 0.6]], dtype=np.float32)
    with FeaturesWriter(folder / "ctx.h5", {"global": "tencrop"}, dtype="float32") as writer:
        writer.add(IDS, **{"global": context})
    with FeaturesWriter(folder / "cnp.h5", {"global": "concepts"}, dtype="float32") as writer:
        writer.add(IDS, **{"global": concepts})
    with FeaturesWriter(folder / "regions.h5", {"backbone": "tiny"}, dtype="float32") as writer:
        writer.add(IDS, regions=np.zeros((4, 2, 3), dtype=np.float32))
    return folder, context, concepts


def split_of(image_ids: list[str], caption_images: list[int]) -> CaptionSplit:
    captions = [f"caption {n}" for n in range(len(caption_images))]
    return CaptionSplit("train", captions, [f"c{n}" for n in range(len(captions))], image_ids,
                        np.array(caption_images, dtype=np.int64))


# ---- sco_tokens ----------------------------------------------------------------------------------------------------

def test_tokens_are_start_words_end_cut_to_max_words_keeping_end():
    tokens = sco_tokens(VOCAB, ["a red dog runs fast", "a red dog", "red zebra", ""], max_words=3)
    assert tokens == [[1, 4, 5, 6, 2],          # five words cut to the first three, <end> kept
                      [1, 4, 5, 6, 2],          # exactly three words: untouched
                      [1, 5, 3, 2],             # an unknown word is <unk> (3)
                      [1, 2]]                   # an empty caption is <start> <end>


def test_tokens_with_zero_words_allowed_keep_only_start_and_end():
    assert sco_tokens(VOCAB, ["a red dog"], max_words=0) == [[1, 2]]


# ---- check_global --------------------------------------------------------------------------------------------------

def test_check_global_returns_the_width_of_each_side(files):
    folder, _, _ = files
    assert check_global(folder / "ctx.h5", False) == 3
    assert check_global(folder / "cnp.h5", True) == 2
    assert check_global(folder / "ctx.h5", False, 3) == 3
    assert check_global(folder / "cnp.h5", True, 2) == 2


def test_check_global_refuses_swapped_files_naming_the_file(files):
    folder, _, _ = files
    with pytest.raises(VLToolsError) as exc:
        check_global(folder / "cnp.h5", False)
    message = str(exc.value)
    assert message.startswith(f"{folder / 'cnp.h5'}: is a concept-scores file where context")
    assert "\n" not in message
    with pytest.raises(VLToolsError, match="is a context file where concept scores") as exc:
        check_global(folder / "ctx.h5", True)
    assert str(exc.value).startswith(str(folder / "ctx.h5"))


def test_check_global_refuses_a_file_without_global(files):
    folder, _, _ = files
    with pytest.raises(VLToolsError, match="has no /global dataset") as exc:
        check_global(folder / "regions.h5", False)
    assert str(exc.value).startswith(str(folder / "regions.h5"))


def test_check_global_refuses_a_width_other_than_the_model_s(files):
    folder, _, _ = files
    with pytest.raises(VLToolsError, match="has 3 context dimensions but the model was built for 5"):
        check_global(folder / "ctx.h5", False, 5)
    with pytest.raises(VLToolsError, match=r"has 2 concepts \(K\) but the model was built for 7"):
        check_global(folder / "cnp.h5", True, 7)


# ---- check_split_images --------------------------------------------------------------------------------------------

def test_split_images_all_present_pass(files):
    folder, _, _ = files
    check_split_images(split_of(["im3", "im0"], [0, 1, 1]), folder / "ctx.h5", "caps.jsonl")


def test_split_image_without_a_row_is_named_with_the_count(files):
    folder, _, _ = files
    split = split_of(["im1", "gone", "im2", "lost"], [0, 1, 2, 3])
    with pytest.raises(VLToolsError) as exc:
        check_split_images(split, folder / "ctx.h5", "caps.jsonl")
    message = str(exc.value)
    assert message.startswith("caps.jsonl: image_id 'gone' has no row in ")
    assert str(folder / "ctx.h5") in message and "(2 image(s) missing)" in message and "\n" not in message


# ---- ImageVectors and VectorBlocks ---------------------------------------------------------------------------------

def test_vectors_are_read_in_the_order_asked_with_repeats(files):
    folder, context, concepts = files
    vectors = ImageVectors(folder / "ctx.h5", folder / "cnp.h5")
    try:
        ctx, cnp = vectors.read(["im3", "im0", "im3", "im1"])
    finally:
        vectors.close()
    assert ctx.dtype == np.float32 and cnp.dtype == np.float32
    np.testing.assert_array_equal(ctx, context[[3, 0, 3, 1]])
    np.testing.assert_array_equal(cnp, concepts[[3, 0, 3, 1]])


@pytest.mark.parametrize("side", ["context", "concepts"])
def test_an_unused_side_is_an_empty_b_by_0_array(files, side):
    folder, context, concepts = files
    vectors = ImageVectors(folder / "ctx.h5", None) if side == "context" else ImageVectors(None, folder / "cnp.h5")
    try:
        ctx, cnp = vectors.read(["im2", "im1"])
    finally:
        vectors.close()
    if side == "context":
        np.testing.assert_array_equal(ctx, context[[2, 1]])
        assert cnp.shape == (2, 0) and cnp.dtype == np.float32
    else:
        np.testing.assert_array_equal(cnp, concepts[[2, 1]])
        assert ctx.shape == (2, 0) and ctx.dtype == np.float32


def test_unknown_id_is_an_error_naming_it_and_the_file(files):
    folder, _, _ = files
    vectors = ImageVectors(folder / "ctx.h5", None)
    try:
        with pytest.raises(VLToolsError, match="'nope' is not in this features file") as exc:
            vectors.read(["im0", "nope"])
        assert str(folder / "ctx.h5") in str(exc.value)
    finally:
        vectors.close()


def test_readers_are_reopened_in_another_process(files, monkeypatch):
    folder, context, _ = files
    vectors = ImageVectors(folder / "ctx.h5", None)
    first = vectors.readers
    assert vectors.readers is first                       # same process: opened once
    monkeypatch.setattr("os.getpid", lambda: -1)          # as in a DataLoader worker after fork
    second = vectors.readers
    assert second is not first and second[0] is not first[0]
    np.testing.assert_array_equal(vectors.read(["im1"])[0], context[[1]])
    monkeypatch.undo()
    first[0].close()
    vectors.close()
    assert vectors._readers is None


def test_vector_blocks_serve_consecutive_blocks_as_tensors(files):
    folder, context, concepts = files
    vectors = ImageVectors(folder / "ctx.h5", folder / "cnp.h5")
    order = ["im2", "im0", "im3", "im1", "im0"]
    blocks = VectorBlocks(vectors, order, batch_size=2)
    try:
        assert len(blocks) == 3
        rows = [[2, 0], [3, 1], [0]]
        for block, expected in zip(blocks, rows, strict=True):
            ctx, cnp = block
            assert isinstance(ctx, torch.Tensor) and ctx.dtype == torch.float32
            np.testing.assert_array_equal(ctx.numpy(), context[expected])
            np.testing.assert_array_equal(cnp.numpy(), concepts[expected])
        with pytest.raises(IndexError):
            blocks[3]
    finally:
        vectors.close()


def test_vector_blocks_refuse_a_batch_size_below_one(files):
    folder, _, _ = files
    with pytest.raises(VLToolsError, match="image batch size must be at least 1, not 0"):
        VectorBlocks(ImageVectors(folder / "ctx.h5", None), IDS, batch_size=0)


# ---- SCODataset and collate_sco ------------------------------------------------------------------------------------

def test_dataset_items_carry_their_image_s_rows_and_the_collate_pads_tokens(files):
    folder, context, concepts = files
    split = split_of(["im2", "im0"], [0, 0, 1])            # two captions of im2, one of im0
    tokens = [[1, 4, 2], [1, 5, 6, 7, 2], [1, 2]]
    dataset = SCODataset(ImageVectors(folder / "ctx.h5", folder / "cnp.h5"), split, tokens)
    try:
        assert len(dataset) == 3
        items = dataset.__getitems__([2, 0, 1])
        assert [item["image_index"] for item in items] == [1, 0, 0]
        assert [item["tokens"] for item in items] == [tokens[2], tokens[0], tokens[1]]
        one = dataset[1]
        np.testing.assert_array_equal(one["context"], context[2])
        batch = collate_sco(items)
    finally:
        dataset.vectors.close()
    np.testing.assert_array_equal(batch["context"].numpy(), context[[0, 2, 2]])
    np.testing.assert_array_equal(batch["concepts"].numpy(), concepts[[0, 2, 2]])
    assert batch["tokens"].tolist() == [[1, 2, 0, 0, 0], [1, 4, 2, 0, 0], [1, 5, 6, 7, 2]]
    assert batch["lengths"].tolist() == [2, 3, 5]
    assert batch["image_index"].tolist() == [1, 0, 0] and batch["image_index"].dtype == torch.long


# ---- model_vectors -------------------------------------------------------------------------------------------------

def config(use_context: bool, use_concepts: bool, context_dim: int = 3, concept_dim: int = 2) -> dict:
    return {"use_context": use_context, "use_concepts": use_concepts, "context_dim": context_dim,
            "concept_dim": concept_dim}


def test_a_fusing_model_reads_both_files(files):
    folder, context, concepts = files
    vectors = model_vectors(config(True, True), folder / "ctx.h5", folder / "cnp.h5")
    try:
        assert vectors.paths == (folder / "ctx.h5", folder / "cnp.h5")
        ctx, cnp = vectors.read(["im1"])
    finally:
        vectors.close()
    np.testing.assert_array_equal(ctx, context[[1]])
    np.testing.assert_array_equal(cnp, concepts[[1]])


def test_context_held_in_memory_is_read_as_its_file(files):
    folder, context, concepts = files
    held = FeaturesInMemory("source (in memory)", {"ids": np.array(IDS, dtype=object), "global": context},
                            {"global": "tencrop"})
    vectors = model_vectors(config(True, True), held, folder / "cnp.h5")
    try:
        assert vectors.paths == (held, folder / "cnp.h5")
        ctx, cnp = vectors.read(["im2", "im0", "im2"])
    finally:
        vectors.close()
    np.testing.assert_array_equal(ctx, context[[2, 0, 2]])
    np.testing.assert_array_equal(cnp, concepts[[2, 0, 2]])


def test_a_fusing_model_without_concept_scores_is_refused_naming_the_source(files):
    folder, _, _ = files
    with pytest.raises(VLToolsError) as exc:
        model_vectors(config(True, True), folder / "ctx.h5", None)
    assert str(exc.value).startswith(f"{folder / 'ctx.h5'}: this SCO model fuses context and concepts")
    assert "--concepts" in str(exc.value)


def test_a_context_only_model_ignores_the_concepts_file(files):
    folder, _, _ = files
    vectors = model_vectors(config(True, False), folder / "ctx.h5", folder / "cnp.h5")
    assert vectors.paths == (folder / "ctx.h5", None)


def test_a_concepts_only_model_reads_the_source_or_the_concepts_file(files):
    folder, _, _ = files
    assert model_vectors(config(False, True), folder / "cnp.h5", None).paths == (None, folder / "cnp.h5")
    assert model_vectors(config(False, True), folder / "ctx.h5", folder / "cnp.h5").paths == \
        (None, folder / "cnp.h5")


@pytest.mark.parametrize(("cfg", "source", "concepts", "message"), [
    (config(True, True, context_dim=4), "ctx.h5", "cnp.h5", "has 3 context dimensions but the model was built for 4"),
    (config(True, True, concept_dim=5), "ctx.h5", "cnp.h5", r"has 2 concepts \(K\) but the model was built for 5"),
    (config(True, True), "cnp.h5", "ctx.h5", "is a concept-scores file where context"),
    (config(False, True), "ctx.h5", None, "is a context file where concept scores"),
])
def test_model_vectors_check_kinds_and_widths_against_the_model(files, cfg, source, concepts, message):
    folder, _, _ = files
    with pytest.raises(VLToolsError, match=message):
        model_vectors(cfg, folder / source, folder / concepts if concepts else None)


# ---- generated sentences ("ctx + sen") ------------------------------------------------------------------------------

def write_generated(folder, lines: list[str]):
    path = folder / "generated.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_generated_sentences_are_tokens_of_each_image_cut_to_max_words(tmp_path):
    path = write_generated(tmp_path, ['{"image_id": "im1", "caption": "a red dog runs fast"}',
                                      '{"image_id": "im0", "caption": "a cat"}'])
    sentences = GeneratedSentences(path, VOCAB, max_words=3)
    assert sentences.take(["im0", "im1", "im0"]) == [[1, 4, 3, 2], [1, 4, 5, 6, 2], [1, 4, 3, 2]]
    sentences.check(["im1", "im0"], "caps.jsonl")


def test_a_second_generated_sentence_of_an_image_is_refused_naming_both_records(tmp_path):
    path = write_generated(tmp_path, ['{"image_id": "im0", "caption": "a dog"}',
                                      '{"image_id": "im1", "caption": "a red dog"}',
                                      '{"image_id": "im0", "caption": "a fast dog"}'])
    with pytest.raises(VLToolsError, match=r"generated.jsonl: record 3 is a second caption of image_id 'im0' "
                                           r"\(first in record 1\); give one generated sentence per image"):
        GeneratedSentences(path, VOCAB, max_words=50)


def test_an_image_without_a_generated_sentence_is_named_with_the_count(tmp_path):
    path = write_generated(tmp_path, ['{"image_id": "im0", "caption": "a dog"}'])
    sentences = GeneratedSentences(path, VOCAB, max_words=50)
    with pytest.raises(VLToolsError, match=r"generated.jsonl: has no generated sentence of image_id 'im2' named by "
                                           r"caps.jsonl \(2 image\(s\) missing\); caption every image"):
        sentences.check(["im0", "im2", "im3"], "caps.jsonl")


def test_vector_blocks_and_the_collate_carry_padded_generated_sentences(files, tmp_path):
    folder, context, _ = files
    path = write_generated(tmp_path, ['{"image_id": "im0", "caption": "a dog"}',
                                      '{"image_id": "im2", "caption": "a red dog runs"}'])
    vectors = ImageVectors(folder / "ctx.h5", None, GeneratedSentences(path, VOCAB, max_words=50))
    try:
        ctx, cnp, tokens, lengths = VectorBlocks(vectors, ["im2", "im0"], batch_size=2)[0]
        items = SCODataset(vectors, split_of(["im2", "im0"], [0, 1]), [[1, 2], [1, 5, 2]]).__getitems__([1, 0])
    finally:
        vectors.close()
    np.testing.assert_array_equal(ctx.numpy(), context[[2, 0]])
    assert cnp.shape == (2, 0)
    assert tokens.tolist() == [[1, 4, 5, 6, 7, 2], [1, 4, 6, 2, 0, 0]] and lengths.tolist() == [6, 4]
    batch = collate_sco(items)
    assert batch["sentence_tokens"].tolist() == [[1, 4, 6, 2, 0, 0], [1, 4, 5, 6, 7, 2]]
    assert batch["sentence_lengths"].tolist() == [4, 6]


def test_blocks_and_batches_without_generated_sentences_have_none(files):
    folder, _, _ = files
    vectors = ImageVectors(folder / "ctx.h5", folder / "cnp.h5")
    try:
        assert len(VectorBlocks(vectors, IDS, batch_size=4)[0]) == 2
        items = SCODataset(vectors, split_of(["im0"], [0]), [[1, 2]]).__getitems__([0])
    finally:
        vectors.close()
    assert "sentence_tokens" not in collate_sco(items)


def test_a_sentence_model_reads_the_generated_sentences_and_ignores_the_concepts(files, tmp_path):
    folder, _, _ = files
    path = write_generated(tmp_path, ['{"image_id": "im1", "caption": "a fast dog"}'])
    cfg = {**config(True, False), "use_sentence": True, "max_words": 50}
    vectors = model_vectors(cfg, folder / "ctx.h5", folder / "cnp.h5", path, VOCAB)
    assert vectors.paths == (folder / "ctx.h5", None)
    assert vectors.sentences.take(["im1"]) == [[1, 4, 8, 6, 2]]
    with pytest.raises(VLToolsError, match=r"ctx.h5: this SCO model \(ctx \+ sen\) represents each image by a "
                                           r"generated sentence; give them with --sentences"):
        model_vectors(cfg, folder / "ctx.h5", None, None, VOCAB)
    # the sentence alone: the context file still names the images
    alone = model_vectors({**cfg, "use_context": False}, folder / "ctx.h5", None, path, VOCAB)
    try:
        assert alone.paths == (folder / "ctx.h5", None) and alone.readers[0].ids == IDS
    finally:
        alone.close()
    assert model_vectors(config(True, False), folder / "ctx.h5", None, path, VOCAB).sentences is None

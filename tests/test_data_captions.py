"""Matching data: caption splits, image checks, vocabulary sources, streamed regions and collation."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import torch
from tiny_matching import make_world

from vltools.data.captions import (
    MatchingDataset,
    check_images,
    collate_matching,
    load_vocabulary,
    read_split,
    split_of,
)
from vltools.data.converters.scan_vocab import vocab_document
from vltools.errors import VLToolsError
from vltools.io.checkpoints import save_checkpoint
from vltools.io.features import FeaturesWriter
from vltools.io.records import write_records
from vltools.text.captions import pad_tokens
from vltools.text.vocab import Vocabulary


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("world"))


def test_read_split_numbers_images_by_first_appearance(tmp_path):
    path = tmp_path / "caps.jsonl"
    write_records(path, [{"image_id": "b", "caption": "x", "split": "train"},
                         {"image_id": "a", "caption": "y", "split": "val"},
                         {"image_id": "a", "caption": "z", "split": "train"},
                         {"image_id": "b", "caption": "w", "split": "train"}])
    split = read_split(path, "train")
    assert split.image_ids == ["b", "a"]
    assert split.captions == ["x", "z", "w"]
    assert split.caption_image_index.tolist() == [0, 1, 0]
    assert split.caption_ids == ["b#0", "a#1", "b#1"]  # k counts the image's captions over the whole file
    with pytest.raises(VLToolsError, match=r"no captions in split 'test' \(splits present: train, val; choose one "
                                           r"with split\)"):  # from Python; the command line says --split
        read_split(path, "test")


def test_check_images_names_the_missing_id(world, tmp_path):
    features, _ = world
    path = tmp_path / "caps.jsonl"
    write_records(path, [{"image_id": "img000", "caption": "x", "split": "train"},
                         {"image_id": "ghost", "caption": "y", "split": "train"}])
    with pytest.raises(VLToolsError, match=r"image_id 'ghost' is not in .*feats.h5 \(1 image\(s\) missing\)"):
        check_images(read_split(path, "train"), features, path)


def test_vocabulary_sources(world, tmp_path):
    _, captions = world
    train = read_split(captions, "train")
    built = load_vocabulary(None, train.captions)
    # reference: words of the training captions seen at least 4 times (all tiny-world words are)
    counts: dict[str, int] = {}
    for caption in train.captions:
        for word in caption.split():
            counts[word] = counts.get(word, 0) + 1
    assert set(built.words[4:]) == {w for w, n in counts.items() if n >= 4}
    with pytest.raises(VLToolsError, match=r"holds no word seen at least 1000000 times .*; lower "
                                           r"task.vocab_threshold$"):
        load_vocabulary(None, train.captions, threshold=10**6)
    scan = tmp_path / "vocab.json"
    scan.write_text(json.dumps(built.to_scan_json()), encoding="utf-8")
    assert load_vocabulary(scan, ()).words == built.words
    listed = tmp_path / "words.json"
    listed.write_text(json.dumps(built.words), encoding="utf-8")
    assert load_vocabulary(listed, ()).words == built.words
    checkpoint = tmp_path / "m.pt"
    save_checkpoint(checkpoint, "vse", {}, {"w": torch.zeros(1)}, vocab=built.words, schema=1)
    assert load_vocabulary(checkpoint, ()).words == built.words
    converted = tmp_path / "vocab.vltools.json"
    converted.write_text(json.dumps(vocab_document(built)), encoding="utf-8")
    assert load_vocabulary(converted, ()).words == built.words
    with pytest.raises(VLToolsError, match="no such vocabulary file"):
        load_vocabulary(tmp_path / "none.json", ())
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(VLToolsError, match="bad.json: not a JSON vocabulary"):
        load_vocabulary(bad, ())


def test_dataset_reads_each_captions_image_rows(world):
    features, captions = world
    split = read_split(captions, "val")
    vocab = load_vocabulary(None, split.captions, threshold=1)
    data = MatchingDataset(features, split, vocab)
    assert len(data) == len(split.captions)
    with h5py.File(features) as handle:
        ids = [i.decode() for i in handle["ids"][:]]
        all_regions = handle["regions"][:]
    picks = [7, 0, 7, 33, 12]
    items = data.__getitems__(picks)
    for index, item in zip(picks, items, strict=True):
        image = split.image_ids[split.caption_image_index[index]]
        np.testing.assert_array_equal(item["regions"], all_regions[ids.index(image)])
        assert item["num_regions"] == all_regions.shape[1]
        assert item["tokens"] == vocab.encode(split.captions[index])
        assert item["image_index"] == split.caption_image_index[index] and item["caption_index"] == index
    assert data[12]["caption_index"] == 12


def test_variable_region_counts_come_from_num_regions(tmp_path):
    features, captions = tmp_path / "f.h5", tmp_path / "c.jsonl"
    with FeaturesWriter(features, {}) as writer:
        writer.add(["a", "b"], regions=np.ones((2, 3, 4)), num_regions=np.array([3, 1]))
    write_records(captions, [{"image_id": i, "caption": "x", "split": "train"} for i in ("b", "a")])
    split = read_split(captions, "train")
    batch = collate_matching(MatchingDataset(features, split, Vocabulary.build(["x"], 1)).__getitems__([0, 1]))
    assert batch["num_regions"].tolist() == [1, 3]
    assert batch["regions"].dtype == torch.float32 and batch["regions"].shape == (2, 3, 4)


def test_collate_pads_in_item_order():
    token_lists = [[1, 5, 2], [1, 2], [1, 4, 4, 6, 2]]
    items = [{"regions": np.full((2, 3), k, dtype=np.float16), "num_regions": 2, "tokens": tokens,
              "image_index": k, "caption_index": 10 + k} for k, tokens in enumerate(token_lists)]
    batch = collate_matching(items)
    assert batch["tokens"].tolist() == [[1, 5, 2, 0, 0], [1, 2, 0, 0, 0], [1, 4, 4, 6, 2]]
    assert batch["lengths"].tolist() == [3, 2, 5]
    assert batch["regions"][:, 0, 0].tolist() == [0.0, 1.0, 2.0]
    assert batch["image_index"].tolist() == [0, 1, 2] and batch["caption_index"].tolist() == [10, 11, 12]
    tokens, lengths = pad_tokens([])
    assert tokens.shape == (0, 0) and lengths.tolist() == []


def test_no_split_given_means_test_when_captions_have_splits_and_every_caption_when_none_has(tmp_path):
    bare = tmp_path / "bare.jsonl"
    write_records(bare, [{"image_id": "a", "caption": "x"}, {"image_id": "b", "caption": "y"}])
    every = read_split(bare, None)
    assert every.caption_ids == ["a#0", "b#0"] and every.name == ""
    split = tmp_path / "split.jsonl"
    write_records(split, [{"image_id": "a", "caption": "x", "split": "train"},
                          {"image_id": "b", "caption": "y", "split": "test"}])
    assert read_split(split, None).caption_ids == ["b#0"] and read_split(split, None).name == "test"
    assert read_split(split, None, default="train").caption_ids == ["a#0"]
    with pytest.raises(VLToolsError, match=r"bare.jsonl: no captions in split 'val' \(no caption has a split field; "
                                           r"leave out split to use every caption\)"):
        read_split(bare, "val")
    with pytest.raises(VLToolsError, match=r"no captions in split 'train' \(no caption has a split field; give each "
                                           r"caption a \"split\" field"):
        read_split(bare, "train", chosen_by="train_split")
    with pytest.raises(VLToolsError, match=r"no captions in split 'dev' \(splits present: test, train; choose one "
                                           r"with val_split\)"):
        read_split(split, "dev", chosen_by="val_split")


def test_split_of_names_the_one_split_that_was_ranked():
    records = [{"split": "train"}, {"split": "test"}, {"split": "test"}, {}]
    ids = ["t0", "e0", "e1", "bare"]
    assert split_of(records, ids, ["e0", "e1"]) == "test"
    assert split_of(records, ids, ["t0", "e0"]) is None  # several splits: every caption
    assert split_of(records, ids, ["e0", "bare"]) is None
    assert split_of([{}, {}], ["a", "b"], ["a", "b"]) is None

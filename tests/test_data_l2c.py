"""L2C data: pairs grouped by id, feature maps with resized masks, bad inputs as one-line errors."""

from __future__ import annotations

import logging

import h5py
import numpy as np
import pytest
import torch
from l2c_helpers import DIM, SIZE, make_world, write_jsonl, write_maps

from vltools.data.l2c import (
    CaptionDataset,
    FeatureMaps,
    PairDataset,
    check_map_features,
    collate_images,
    collate_pairs,
    read_image_captions,
    read_pairs,
)
from vltools.errors import VLToolsError
from vltools.io.features import FeaturesReader


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("l2c"))


def encode(text: str) -> list[int]:
    return [1, *(len(w) for w in text.split()), 2]


def test_pairs_are_grouped_by_id_in_file_order(world):
    train = read_pairs(world["pairs"], "train")
    assert train.pair_ids[:3] == ["p0", "p1", "p2"] and "p3" not in train.pair_ids
    assert len(train.descriptions[0]) == 2 and train.image_a[1] == "p1a" and train.image_b[1] == "p1b"
    assert len(train.items()) == 2 * len(train)


def test_pair_items_carry_both_images_maps_and_the_description(world):
    pairs = read_pairs(world["pairs"], "train")
    dataset = PairDataset(FeatureMaps(world["features"]), pairs, encode)
    items = dataset.__getitems__([3, 0])
    with FeaturesReader(world["features"]) as reader:
        direct = reader.read(["p1a", "p1b"])
    np.testing.assert_array_equal(items[0]["featmap_a"], direct["featmap"][0])
    np.testing.assert_array_equal(items[0]["mask_b"], direct["mask"][1])
    assert items[0]["tokens"] == encode(pairs.descriptions[1][1]) and items[0]["pair_index"] == 1
    batch = collate_pairs(items)
    assert batch["featmap_a"].shape == (2, DIM, SIZE, SIZE) and batch["mask_a"].shape == (2, SIZE, SIZE)
    assert batch["tokens"].shape[0] == 2 and batch["tokens"].dtype == torch.long


def test_caption_items_and_batches(world):
    captions = read_image_captions(world["captions"], "train")
    dataset = CaptionDataset(FeatureMaps(world["aux_features"]), captions, encode)
    batch = collate_images(dataset.__getitems__([0, 5]))
    assert batch["featmap"].shape == (2, DIM, SIZE, SIZE)
    assert batch["lengths"].tolist() == [6, 6]  # <start> a w w w <end>


def test_masks_of_another_size_are_area_resized_and_said_once(tmp_path, caplog):
    path = write_maps(tmp_path / "big.h5", ["x", "y"], mask_size=2 * SIZE)
    with caplog.at_level(logging.WARNING, logger="vltools"):
        check_map_features(path, ["x", "y"], "pairs.jsonl")
    assert sum("area-resized" in r.message for r in caplog.records) == 1
    featmaps, masks = FeatureMaps(path).read(["y"])
    with FeaturesReader(path) as reader:
        big = reader.read(["y"])["mask"][0]
    direct = big.reshape(SIZE, 2, SIZE, 2).mean(axis=(1, 3))
    np.testing.assert_allclose(masks[0], direct, rtol=1e-6)


def test_empty_masks_are_kept_and_counted(tmp_path, caplog):
    path = write_maps(tmp_path / "empty.h5", ["x", "y", "z"], empty=("y", "z"))
    with caplog.at_level(logging.WARNING, logger="vltools"):
        check_map_features(path, ["x", "y", "z"], "pairs.jsonl")
    assert any("2 of 3 images have an empty mask" in r.message for r in caplog.records)
    assert FeatureMaps(path).read(["y"])[1].sum() == 0


def test_missing_images_and_fields_are_one_line_errors(tmp_path, world):
    with pytest.raises(VLToolsError, match=r"pairs.jsonl: image 'nope' is not in .*segment-pool"):
        check_map_features(world["features"], ["p0a", "nope"], "pairs.jsonl")
    no_mask = write_maps(tmp_path / "nomask.h5", ["x"], fields=("featmap",))
    with pytest.raises(VLToolsError, match=r"has no /mask dataset; .*vltools segment-pool"):
        check_map_features(no_mask, ["x"], "pairs.jsonl")


def test_training_pairs_without_description_are_refused(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [
        {"pair_id": "a", "image_a": "1", "image_b": "2", "description": "x", "split": "train"},
        {"pair_id": "b", "image_a": "3", "image_b": "4", "split": "train"}])
    with pytest.raises(VLToolsError, match=r"pair_id 'b': no description in split 'train'"):
        read_pairs(path, "train", need_descriptions=True)
    assert read_pairs(path, "train").descriptions == [["x"], []]
    with pytest.raises(VLToolsError, match="no pairs in split 'val'"):
        read_pairs(path, "val")


def test_a_pair_id_naming_two_image_pairs_is_refused(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [
        {"pair_id": "a", "image_a": "1", "image_b": "2", "description": "x"},
        {"pair_id": "a", "image_a": "1", "image_b": "3", "description": "y"}])
    with pytest.raises(VLToolsError, match="pair_id 'a' names images"):
        read_pairs(path, None)


def test_preloaded_and_streamed_reads_agree_with_the_file(world):
    ids = ["p5b", "p0a", "p5b", "p2a"]
    with FeaturesReader(world["features"]) as reader:
        direct = reader.read(ids)
    for maps in (FeatureMaps(world["features"]), FeatureMaps(world["features"], preload_bytes=0)):
        featmaps, masks = maps.read(ids)
        np.testing.assert_array_equal(featmaps, direct["featmap"])
        np.testing.assert_array_equal(masks, direct["mask"])
    assert FeatureMaps(world["features"], preload_bytes=0).read([])[0].shape == (0, DIM, SIZE, SIZE)


@pytest.mark.parametrize("preload_bytes", [1 << 30, 0])
def test_a_non_finite_feature_map_is_refused_naming_its_image(tmp_path, preload_bytes):
    """Both read paths (preloaded, row by row) go through the features reader's non-finite check: a NaN map
    would otherwise be decoded into a silently wrong description."""
    path = write_maps(tmp_path / "maps.h5", ["a", "b", "c"])
    with h5py.File(path, "a") as handle:
        handle["featmap"][1, 0, 0, 0] = np.nan
    maps = FeatureMaps(path, preload_bytes=preload_bytes)
    assert maps.read(["c", "a"])[0].shape == (2, DIM, SIZE, SIZE)    # rows asked for are all finite
    with pytest.raises(VLToolsError, match=r"maps.h5: image id 'b': /featmap holds NaN or infinite values"):
        maps.read(["a", "b"])

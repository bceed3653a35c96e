"""Padded blocks for batched inference: how items are cut into blocks, caption padding and lengths, and region
features read back from a features HDF5 in the order asked."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vltools.data.blocks import Blocks, CaptionBlocks, FeatureBlocks
from vltools.errors import VLToolsError
from vltools.io.features import FeaturesReader, FeaturesWriter

K, D = 3, 4


class Positions(Blocks):
    """Blocks whose content is the list of positions asked for (shows how items are cut)."""

    def __init__(self, n_items: int, batch_size: int) -> None:
        super().__init__(n_items, batch_size, "item")

    def take(self, indices):
        return list(indices)


@pytest.mark.parametrize("n_items,batch_size,expected", [
    (7, 3, [[0, 1, 2], [3, 4, 5], [6]]),
    (6, 3, [[0, 1, 2], [3, 4, 5]]),
    (2, 5, [[0, 1]]),
    (3, 1, [[0], [1], [2]]),
    (0, 4, []),
])
def test_blocks_cut_items_in_order_with_a_short_last_block(n_items, batch_size, expected):
    blocks = Positions(n_items, batch_size)
    assert len(blocks) == len(expected)
    assert [blocks[i] for i in range(len(blocks))] == expected
    assert list(blocks) == expected      # iteration stops at the IndexError past the end
    assert blocks.sizes == [len(block) for block in expected]


class Unreadable(Positions):
    def take(self, indices):
        raise AssertionError("a block was built")


def test_block_sizes_are_known_without_building_a_block():
    """The similarity loop and its progress count rows per block before the work; building a block of features
    would read it from disk once more."""
    assert Unreadable(7, 3).sizes == [3, 3, 1]


def test_index_past_either_end_is_an_index_error():
    blocks = Positions(7, 3)
    with pytest.raises(IndexError):
        blocks[3]
    with pytest.raises(IndexError):
        blocks[-1]        # no negative indexing: a negative block number is a bug in the caller
    with pytest.raises(IndexError):
        Positions(0, 2)[0]


@pytest.mark.parametrize("batch_size", [0, -2])
def test_batch_size_below_one_is_refused_naming_what_is_batched(batch_size):
    with pytest.raises(VLToolsError, match=f"^item batch size must be at least 1, not {batch_size}$"):
        Positions(5, batch_size)
    with pytest.raises(VLToolsError, match=f"^caption batch size must be at least 1, not {batch_size}$"):
        CaptionBlocks([[1, 2]], batch_size)


TOKENS = [[1, 5, 2], [1, 2], [1, 6, 7, 8, 2], [1, 9, 9, 2], [1, 4, 2]]


def test_caption_blocks_are_right_padded_with_zeros_and_give_lengths():
    blocks = CaptionBlocks(TOKENS, 2)
    assert len(blocks) == 3
    tokens, lengths = blocks[0]
    assert tokens.dtype == torch.long and lengths.dtype == torch.long
    assert tokens.tolist() == [[1, 5, 2], [1, 2, 0]]
    assert lengths.tolist() == [3, 2]
    tokens, lengths = blocks[1]    # padded to this block's longest caption, not the whole set's
    assert tokens.tolist() == [[1, 6, 7, 8, 2], [1, 9, 9, 2, 0]]
    assert lengths.tolist() == [5, 4]
    tokens, lengths = blocks[2]
    assert tokens.tolist() == [[1, 4, 2]]
    assert lengths.tolist() == [3]


def test_caption_blocks_take_any_captions_in_the_order_given():
    blocks = CaptionBlocks(iter(TOKENS), 2)    # any iterable: kept as a list
    tokens, lengths = blocks.take([4, 1, 2])
    assert tokens.tolist() == [[1, 4, 2, 0, 0], [1, 2, 0, 0, 0], [1, 6, 7, 8, 2]]
    assert lengths.tolist() == [3, 2, 5]
    assert len(blocks) == 3


def _regions(n: int) -> np.ndarray:
    """[n, K, D] float32 values exactly representable in float16 (multiples of 1/8), different per image."""
    return np.arange(n * K * D, dtype=np.float32).reshape(n, K, D) / 8 - 3


@pytest.fixture
def features(tmp_path):
    """A features file of 5 images in file order e0..e4 with ragged region counts (two appends)."""
    path = tmp_path / "feats.h5"
    ids = [f"e{i}" for i in range(5)]
    regions = _regions(5)
    counts = np.array([3, 1, 2, 3, 2], dtype=np.int32)
    with FeaturesWriter(path, {"extractor": "test"}, dtype="float32") as writer:
        writer.add(ids[:3], regions=regions[:3], num_regions=counts[:3])
        writer.add(ids[3:], regions=regions[3:], num_regions=counts[3:])
    return path, ids, regions, counts


def test_feature_blocks_read_regions_and_counts_in_the_order_asked(features):
    path, ids, regions, counts = features
    order = ["e3", "e0", "e4", "e1", "e2"]
    rows = [ids.index(i) for i in order]
    with FeaturesReader(path) as reader:
        blocks = FeatureBlocks(reader, order, 2)
        assert len(blocks) == 3
        got = list(blocks)
    assert [len(block[0]) for block in got] == [2, 2, 1]
    for number, (block_regions, block_counts) in enumerate(got):
        wanted = rows[2 * number:2 * number + 2]
        assert block_regions.dtype == torch.float32 and block_counts.dtype == torch.int64
        np.testing.assert_array_equal(block_regions.numpy(), regions[wanted])
        assert block_counts.tolist() == counts[wanted].tolist()


def test_feature_blocks_take_any_images_repeats_included(features):
    path, ids, regions, counts = features
    with FeaturesReader(path) as reader:
        block_regions, block_counts = FeatureBlocks(reader, ["e4", "e2", "e0"], 2).take([2, 0, 2])
    np.testing.assert_array_equal(block_regions.numpy(), regions[[0, 4, 0]])
    assert block_counts.tolist() == [3, 2, 3]


def test_feature_blocks_past_the_end_is_an_index_error(features):
    path, ids, _, _ = features
    with FeaturesReader(path) as reader:
        blocks = FeatureBlocks(reader, ids, 5)
        assert len(blocks) == 1
        with pytest.raises(IndexError):
            blocks[1]


def test_float16_file_gives_float32_blocks_and_no_counts_when_k_is_fixed(tmp_path):
    path = tmp_path / "fixed.h5"
    regions = _regions(3)
    with FeaturesWriter(path, {}, dtype="float16") as writer:
        writer.add(["a", "b", "c"], regions=regions)
    with FeaturesReader(path) as reader:
        assert reader.handle["regions"].dtype == np.float16
        block_regions, block_counts = FeatureBlocks(reader, ["c", "a"], 4)[0]
    assert block_counts is None
    assert block_regions.dtype == torch.float32
    np.testing.assert_array_equal(block_regions.numpy(), regions[[2, 0]])


def test_a_file_without_regions_is_refused_naming_it(tmp_path):
    path = tmp_path / "global.h5"
    with FeaturesWriter(path, {}, dtype="float32") as writer:
        writer.add(["a"], **{"global": np.ones((1, D), dtype=np.float32)})
    with FeaturesReader(path) as reader, pytest.raises(VLToolsError) as caught:
        FeatureBlocks(reader, ["a"], 2)
    message = str(caught.value)
    assert message.startswith(f"{path}: has no /regions dataset")
    assert "\n" not in message


def test_unknown_image_and_bad_batch_size_are_refused_at_construction(features):
    path, ids, _, _ = features
    with FeaturesReader(path) as reader:
        with pytest.raises(VLToolsError, match=r"feats\.h5: image id 'e9' is not in this features file"):
            FeatureBlocks(reader, ["e0", "e9"], 2)
        with pytest.raises(VLToolsError, match="^image batch size must be at least 1, not 0$"):
            FeatureBlocks(reader, ids, 0)

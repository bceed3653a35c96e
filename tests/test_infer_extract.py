"""Extractors: boxes in original pixels, rows independent of batch mates, segment-pool masks."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vltools.errors import VLToolsError
from vltools.infer.extract import RegionExtractor, SegmentExtractor
from vltools.infer.settings import RunOptions
from vltools.vision.images import ImageItem

PHOTOS = Path(__file__).parent / "data" / "photos"
RUN = RunOptions(workers=0, device="cpu", dtype="float32")


def _compute(extractor, items):
    dataset = extractor.dataset(items)
    samples = [dataset[i] for i in range(len(items))]
    with torch.inference_mode():
        return extractor(samples, list(items))


def test_given_boxes_are_kept_in_original_pixels_and_scaled_for_roi():
    items = [ImageItem("china", PHOTOS / "china.jpg", ((10.0, 20.0, 300.0, 400.0), (0.0, 0.0, 640.0, 427.0))),
             ImageItem("cat", PHOTOS / "chelsea.png", ((5.0, 5.0, 50.0, 60.0),))]
    extractor = RegionExtractor(items, RUN, backbone="resnet18", weights="none", regions="boxes", image_size=64)
    out = _compute(extractor, items)
    assert out["boxes"].shape == (2, 2, 4) and out["num_regions"].tolist() == [2, 1]
    assert np.array_equal(out["boxes"][0], np.array(items[0].boxes, dtype=np.float32))
    assert np.array_equal(out["boxes"][1, 0], np.array(items[1].boxes[0], dtype=np.float32))
    assert not out["regions"][1, 1].any() and out["regions"][1, 0].any()
    assert out["image_size"].tolist() == [[427, 640], [300, 451]]


def test_grid_and_detector_boxes_span_the_original_image():
    items = [ImageItem("china", PHOTOS / "china.jpg")]
    grid = _compute(RegionExtractor(items, RUN, backbone="resnet18", weights="none", regions="grid",
                                    image_size=64), items)
    assert grid["boxes"].shape == (1, 4, 4)
    assert np.allclose(grid["boxes"][0, -1], [320, 213.5, 640, 427])
    detector = RegionExtractor(items, RUN, backbone="resnet18", weights="none", regions="detector", image_size=64,
                               num_regions=30, detector_weights="none")
    boxes = _compute(detector, items)["boxes"][0]
    assert boxes.shape == (30, 4)
    assert boxes[:, 2].max() <= 640 + 1e-3 and boxes[:, 3].max() <= 427 + 1e-3
    assert boxes[:, 2].max() > 96  # beyond the resized input's width: stored in original pixels


def test_rows_do_not_depend_on_batch_mates():
    items = [ImageItem("china", PHOTOS / "china.jpg"), ImageItem("cat", PHOTOS / "chelsea.png"),
             ImageItem("coffee", PHOTOS / "coffee.png")]
    extractor = RegionExtractor(items, RUN, backbone="resnet18", weights="none", regions="none",
                                global_pool="avg", image_size=64)
    together = _compute(extractor, items)["global"]
    alone = np.concatenate([_compute(extractor, [item])["global"] for item in items])
    assert np.allclose(together, alone, rtol=1e-4, atol=1e-5)


def test_boxes_mode_needs_valid_boxes():
    run = RunOptions(workers=0, device="cpu")
    with pytest.raises(VLToolsError, match="has no boxes"):
        RegionExtractor([ImageItem("a", PHOTOS / "china.jpg")], run, backbone="resnet18", weights="none",
                        regions="boxes")
    with pytest.raises(VLToolsError, match="is empty"):
        RegionExtractor([ImageItem("a", PHOTOS / "china.jpg", ((5.0, 5.0, 5.0, 9.0),))], run,
                        backbone="resnet18", weights="none", regions="boxes")


def test_segment_pool_mask_files_are_area_averaged_to_the_feature_map(tmp_path):
    shutil.copy(PHOTOS / "chelsea.png", tmp_path / "cat.png")
    masks = tmp_path / "masks"
    masks.mkdir()
    array = np.zeros((300, 451), dtype=np.uint8)
    array[:150] = 255  # top half foreground
    Image.fromarray(array).save(masks / "cat.png")
    items = [ImageItem("cat.png", tmp_path / "cat.png")]
    extractor = SegmentExtractor(RUN, backbone="resnet18", weights="none", image_size=60, mask_dir=masks)
    out = _compute(extractor, items)
    assert extractor.image_size == 64 and out["featmap"].shape == (1, 512, 2, 2)
    assert np.allclose(out["mask"][0], [[1, 1], [0, 0]])

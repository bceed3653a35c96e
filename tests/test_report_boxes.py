"""Detected boxes on the report's thumbnails: read from a features file, best first, labelled, drawn to scale."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from PIL import Image

from vltools.errors import VLToolsError
from vltools.io.features import FeaturesWriter
from vltools.reporting.boxes import Box, draw_boxes, read_boxes
from vltools.reporting.thumbs import Thumbnails
from vltools.vision.images import ImageItem


def write_features(path, names=True):
    attrs = {"label_names": json.dumps(["car", "dog", "tree"]), "attribute_names": json.dumps(["red", "tall"])}
    with FeaturesWriter(path, attrs if names else {}, dtype="float32") as writer:
        writer.add(["a", "b"], regions=np.zeros((2, 3, 4), dtype=np.float32),
                   boxes=np.array([[[0, 0, 10, 10], [5, 5, 50, 40], [1, 1, 2, 2]],
                                   [[2, 2, 8, 8], [0, 0, 0, 0], [0, 0, 0, 0]]], dtype=np.float32),
                   num_regions=np.array([3, 1], dtype=np.int32),
                   labels=np.array([[2, 0, 1], [1, 0, 0]], dtype=np.int64),
                   label_scores=np.array([[0.3, 0.9, 0.1], [0.5, 0, 0]], dtype=np.float32),
                   attributes=np.array([[1, 0, 0], [0, 0, 0]], dtype=np.int64))


def test_boxes_are_read_best_first_with_attribute_and_object_names(tmp_path):
    write_features(tmp_path / "f.h5")
    boxes = read_boxes(tmp_path / "f.h5", ["b", "a", "unknown"], max_boxes=2)
    assert boxes["a"] == [Box(5, 5, 50, 40, "red car"), Box(0, 0, 10, 10, "tall tree")]
    assert boxes["b"] == [Box(2, 2, 8, 8, "red dog")]          # padding rows past /num_regions are not boxes
    assert "unknown" not in boxes


def test_without_names_a_box_shows_its_numbers(tmp_path):
    write_features(tmp_path / "f.h5", names=False)
    assert read_boxes(tmp_path / "f.h5", ["b"], max_boxes=5)["b"] == [Box(2, 2, 8, 8, "attr 0 class 1")]


def test_a_file_holding_none_of_the_shown_ids_warns_in_one_line(tmp_path, caplog):
    write_features(tmp_path / "f.h5")
    with caplog.at_level(logging.WARNING, logger="vltools"):
        assert read_boxes(tmp_path / "f.h5", ["x", "y"], max_boxes=2) == {}
    assert [r.getMessage() for r in caplog.records] == [
        f"report --boxes: {tmp_path / 'f.h5'} holds none of the 2 shown images (e.g. 'x'), so no boxes are drawn; "
        "give the features extracted from these images"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="vltools"):
        read_boxes(tmp_path / "f.h5", ["x", "a"], max_boxes=2)
    assert caplog.records == []


def test_a_file_without_boxes_is_one_line(tmp_path):
    with FeaturesWriter(tmp_path / "g.h5", {}, dtype="float32") as writer:
        writer.add(["a"], regions=np.zeros((1, 2, 4), dtype=np.float32))
    with pytest.raises(VLToolsError, match="g.h5: has no /boxes dataset"):
        read_boxes(tmp_path / "g.h5", ["a"], 3)


def test_boxes_are_drawn_at_the_thumbnail_scale(tmp_path):
    image = Image.new("RGB", (50, 40), "black")
    draw_boxes(image, [Box(20, 20, 80, 60, "")], scale=0.5)          # -> 10,10 .. 40,30 on this image
    pixels = np.asarray(image)
    assert pixels[10, 25].any() and pixels[30, 25].any() and pixels[20, 10].any() and pixels[20, 40].any()
    assert not pixels[20, 25].any() and not pixels[5, 5].any()      # inside and outside stay black


def test_thumbnails_draw_the_boxes_of_their_image_only(tmp_path):
    Image.new("RGB", (200, 100), "black").save(tmp_path / "a.png")
    items = [ImageItem("a", tmp_path / "a.png"), ImageItem("b", tmp_path / "a.png")]
    thumbs = Thumbnails(tmp_path / "out", items, 100, {"a": [Box(0, 0, 100, 50, "red car")]})
    with_boxes, plain = thumbs.image("a"), thumbs.image("b")
    drawn = np.asarray(Image.open(tmp_path / "out" / with_boxes["src"]))
    clean = np.asarray(Image.open(tmp_path / "out" / plain["src"]))
    assert drawn[:, :50].max() > 100 and clean.max() < 10            # the box lies in the left half at scale 0.5
    assert drawn[30:, 60:].max() < 10

"""Foreground masks: class parsing, area averaging, mask files, and the FCN's probability maps."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from vltools.errors import VLToolsError
from vltools.vision.masks import area_resize, build_fcn, load_mask, mask_path, parse_class


def test_parse_class_by_index_or_voc_name():
    assert parse_class("bird") == 3 and parse_class("3") == 3 and parse_class("Person") == 15
    with pytest.raises(VLToolsError, match="not a VOC class"):
        parse_class("unicorn")


def test_area_resize_is_block_mean():
    mask = torch.rand(1, 8, 12)
    expected = mask.view(1, 2, 4, 3, 4).mean(dim=(2, 4))
    assert torch.allclose(area_resize(mask, (2, 3)), expected)


def test_mask_files_8_bit_and_binary(tmp_path):
    (tmp_path / "birds").mkdir()
    array = np.zeros((4, 6), dtype=np.uint8)
    array[:, :3] = 255
    Image.fromarray(array).save(tmp_path / "birds" / "a.png")
    Image.fromarray((array > 0).astype(np.uint8)).save(tmp_path / "b.png")
    assert mask_path(tmp_path, "birds/a.jpg") == tmp_path / "birds" / "a.png"
    assert torch.equal(load_mask(tmp_path, "birds/a.jpg"), torch.from_numpy(array / 255.0))
    assert load_mask(tmp_path, "b.jpg").max() == 1.0
    with pytest.raises(OSError, match="no mask file"):
        load_mask(tmp_path, "missing.jpg")


def test_random_fcn_gives_class_probabilities_at_the_asked_size():
    torch.manual_seed(0)
    model, described = build_fcn("none", class_index=3)
    with torch.inference_mode():
        masks = model(torch.randn(2, 3, 64, 64), (2, 2))
    assert described == "none" and tuple(masks.shape) == (2, 2, 2)
    assert torch.all((masks >= 0) & (masks <= 1))

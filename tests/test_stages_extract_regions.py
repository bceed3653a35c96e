"""vltools.stages.extract_regions: the one function `vltools extract-regions` and `vltools.extract_regions` call."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

import vltools
from vltools.cli import main
from vltools.errors import ArgumentError
from vltools.io.features import FeaturesReader

TINY = {"backbone": "resnet18", "weights": "none", "workers": 0, "device": "cpu", "regions": "grid",
        "image_size": 64, "batch_size": 2}


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    for number in range(5):
        Image.fromarray(rng.integers(0, 255, (40, 56, 3), dtype=np.uint8)).save(folder / f"img{number}.png")
    return folder


def _rows(path):
    with FeaturesReader(path) as reader:
        return reader.ids, reader.read(reader.ids)["regions"]


def test_the_api_takes_shard_and_writes_what_the_command_writes(photos, tmp_path):
    main(["-q", "extract-regions", str(photos), "--backbone", "resnet18", "--weights", "none", "--workers", "0",
          "--device", "cpu", "--regions", "grid", "--image-size", "64", "--batch-size", "2", "--shard", "1/2",
          "-o", str(tmp_path / "cli.h5")])
    assert vltools.extract_regions([photos], tmp_path / "api.h5", shard="1/2", **TINY) == {"written": 3, "failed": 0}
    (cli_ids, cli_rows), (api_ids, api_rows) = _rows(tmp_path / "cli.h5"), _rows(tmp_path / "api.h5")
    assert cli_ids == api_ids == ["img2.png", "img3.png", "img4.png"]   # batches 1 and 2 of 0..2 (of two images)
    np.testing.assert_array_equal(cli_rows, api_rows)


def test_options_that_cannot_go_together_are_a_usage_error_in_pythons_words(photos, tmp_path):
    with pytest.raises(ArgumentError, match=r"^give either num_regions \(fixed K\) or min_regions/max_regions"):
        vltools.extract_regions(photos, tmp_path / "x.h5", **{**TINY, "regions": "detector"}, num_regions=4,
                                min_regions=2)
    with pytest.raises(ArgumentError, match="shard"):
        vltools.extract_regions(photos, tmp_path / "x.h5", shard="3/2", **TINY)
    assert list(tmp_path.iterdir()) == []

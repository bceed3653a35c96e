"""infer/regions.py: option combinations refused in one line before any work."""

from __future__ import annotations

import pytest

from vltools.errors import VLToolsError
from vltools.infer.regions import RegionOptions, extract_regions


@pytest.mark.parametrize(("options", "message"), [
    (RegionOptions(num_regions=5, min_regions=2), "either num_regions"),
    (RegionOptions(regions="bottom-up", global_pool="avg"), "regions=bottom-up takes no global_pool"),
    (RegionOptions(regions="bottom-up", backbone="resnet18"), "takes no global_pool, image_size, backbone"),
    (RegionOptions(detector_vocab="vocab/"), "needs regions=bottom-up"),
])
def test_bad_combinations_are_refused_before_reading_inputs(tmp_path, options, message):
    assert message in options.problem()
    with pytest.raises(VLToolsError, match=message.replace("-", r"\-")):
        extract_regions([tmp_path / "absent"], tmp_path / "out.h5", options)
    assert list(tmp_path.iterdir()) == []


def test_good_combinations_have_no_problem():
    assert RegionOptions().problem() is None
    assert RegionOptions(regions="bottom-up", min_regions=10, max_regions=100).variable
    assert RegionOptions(regions="grid", global_pool="rmac").problem() is None


@pytest.mark.parametrize(("options", "message"), [
    ({"regions": "cells"}, "regions must be one of detector, grid, boxes, none, bottom-up, not 'cells'"),
    ({"global_pool": "bogus"}, "global_pool must be one of avg, rmac, tencrop, None, not 'bogus'"),
    ({"image_size": 10**9}, "image_size must be an integer from 16 to 4096, not 1000000000"),
    ({"image_size": "32"}, "image_size must be an integer from 16 to 4096, not '32'"),
    ({"num_regions": 0}, "num_regions must be a positive integer, not 0"),
    ({"score_threshold": float("nan")}, "score_threshold must be a finite number from 0 to 1, not nan"),
    ({"backbone": "resnet9"}, "backbone must be one of resnet101"),
])
def test_each_option_is_checked_when_the_options_are_made(options, message):
    with pytest.raises(VLToolsError, match=message.replace("(", r"\(")):
        RegionOptions(**options)

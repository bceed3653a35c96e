"""infer/regions.py: option combinations refused in one line before any work."""

from __future__ import annotations

import pytest

from vltools.errors import VLToolsError
from vltools.infer.regions import RegionOptions, extract_regions


@pytest.mark.parametrize(("options", "message"), [
    (RegionOptions(num_regions=5, min_regions=2), "either --num-regions"),
    (RegionOptions(regions="bottom-up", global_pool="avg"), "takes no --global"),
    (RegionOptions(regions="bottom-up", backbone="resnet18"), "takes no --global, --image-size, --backbone"),
    (RegionOptions(detector_vocab="vocab/"), "needs --regions bottom-up"),
    (RegionOptions(regions="cells"), "regions 'cells'"),
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

"""Global pooling: R-MAC regions follow Tolias et al.'s grid, R-MAC and averages match brute force."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vltools.vision.pooling import average, rmac, rmac_region_vectors, rmac_regions, ten_crop_average


def test_rmac_regions_of_a_square_map():
    # 12 x 12: level 1 one 12-wide region, level 2 four 8-wide (starts 0, 4), level 3 nine 6-wide (0, 3, 6)
    expected = [(0, 0, 12)] + [(y, x, 8) for y in (0, 4) for x in (0, 4)] + \
        [(y, x, 6) for y in (0, 3, 6) for x in (0, 3, 6)]
    assert rmac_regions(12, 12) == expected


def test_rmac_regions_of_a_wide_map_overlap_about_40_percent():
    # 12 x 18: one extra region along the width (2 level-1 regions overlapping 50%, the closest to 40%)
    regions = rmac_regions(12, 18)
    level1 = [r for r in regions if r[2] == 12]
    level2 = [r for r in regions if r[2] == 8]
    level3 = [r for r in regions if r[2] == 6]
    assert level1 == [(0, 0, 12), (0, 6, 12)]
    assert level2 == [(y, x, 8) for y in (0, 4) for x in (0, 5, 10)]
    assert level3 == [(y, x, 6) for y in (0, 3, 6) for x in (0, 4, 8, 12)]


def _starts_by_level(regions):
    """{size: (sorted y starts, sorted x starts)} of a region list."""
    return {size: (sorted({y for y, _, s in regions if s == size}), sorted({x for _, x, s in regions if s == size}))
            for size in sorted({r[2] for r in regions}, reverse=True)}


def test_rmac_region_starts_are_floored_as_in_the_reference_on_7_x_10():
    # Tolias et al.'s rmac_regionvec_act.m on H = 7, W = 10: w = 7, the long side's step b = 3 / (s - 1) for
    # s = 2..7 regions gives overlaps 1 - b / 7 = .571, .786, .857, ...: s = 2 (closest to 0.4), so one extra region
    # along W. Starts = floor(i (side - wl) / (count - 1)):
    # l = 1: wl = 7, W: 2 regions, step 3 -> 0, 3; H: 1 region -> 0
    # l = 2: wl = floor(14 / 3) = 4, W: 3 regions, step 3 -> 0, 3, 6; H: 2 regions, step 3 -> 0, 3
    # l = 3: wl = floor(14 / 4) = 3, W: 4 regions, step 7/3 -> 0, 2, 4, 7 (rounding gave 0, 2, 5, 7);
    #        H: 3 regions, step 2 -> 0, 2, 4
    regions = rmac_regions(7, 10)
    assert _starts_by_level(regions) == {7: ([0], [0, 3]), 4: ([0, 3], [0, 3, 6]), 3: ([0, 2, 4], [0, 2, 4, 7])}
    assert len(regions) == 2 + 6 + 12


def test_rmac_region_starts_are_floored_as_in_the_reference_on_13_x_17():
    # H = 13, W = 17: w = 13, b = 4 / (s - 1), overlaps 1 - b / 13 = .692, .846, ...: s = 2, one extra along W.
    # l = 1: wl = 13, W: step 4 -> 0, 4; H -> 0
    # l = 2: wl = floor(26 / 3) = 8, W: 3 regions, step 4.5 -> 0, 4, 9 (rounding gave 0, 5, 9);
    #        H: 2 regions, step 5 -> 0, 5
    # l = 3: wl = floor(26 / 4) = 6, W: 4 regions, step 11/3 -> 0, 3, 7, 11 (rounding gave 0, 4, 7, 11);
    #        H: 3 regions, step 3.5 -> 0, 3, 7 (rounding gave 0, 4, 7)
    regions = rmac_regions(13, 17)
    assert _starts_by_level(regions) == {13: ([0], [0, 4]), 8: ([0, 5], [0, 4, 9]), 6: ([0, 3, 7], [0, 3, 7, 11])}
    assert regions[:3] == [(0, 0, 13), (0, 4, 13), (0, 0, 8)]
    # the transposed map has the same starts with the axes swapped
    assert sorted(rmac_regions(17, 13)) == sorted((x, y, s) for y, x, s in regions)


def test_the_round_grid_is_vltools_grid_before_issue_23():
    # the starts the comments above give for rounding (R-MAC checkpoints trained then read them back this way)
    assert _starts_by_level(rmac_regions(7, 10, grid="round")) == {
        7: ([0], [0, 3]), 4: ([0, 3], [0, 3, 6]), 3: ([0, 2, 4], [0, 2, 5, 7])}
    assert _starts_by_level(rmac_regions(13, 17, grid="round")) == {
        13: ([0], [0, 4]), 8: ([0, 5], [0, 5, 9]), 6: ([0, 4, 7], [0, 4, 7, 11])}
    # levels 0 cells wide were kept as one-cell regions: 1 + 2 x 2 + 3 x 3 of them on a one-cell map
    assert rmac_regions(1, 1, grid="round") == [(0, 0, 1)] * 14
    assert rmac_regions(12, 12, grid="round") == rmac_regions(12, 12)  # the grids agree where steps are whole
    with pytest.raises(ValueError, match="grid must be one of"):
        rmac_regions(7, 10, grid="nearest")


def test_rmac_regions_of_a_map_one_cell_wide_stop_at_the_first_level():
    # w = 1: level 2 and 3 regions would be floor(2 / 3) = floor(2 / 4) = 0 cells wide; the reference skips them
    assert rmac_regions(1, 1) == [(0, 0, 1)]
    # 1 x 3: b = 2 / (s - 1), overlaps 1 - b = -1, 0, .33, .5, ...: s = 4 regions of 1 cell, step 2/3 -> 0, 0, 1, 2
    assert rmac_regions(1, 3) == [(0, 0, 1), (0, 0, 1), (0, 1, 1), (0, 2, 1)]


def test_rmac_equals_brute_force_sum_of_normalised_region_maxima():
    rng = np.random.default_rng(0)
    featmap = rng.standard_normal((5, 12, 12)).astype(np.float32)
    total = np.zeros(5)
    regions = [(0, 0, 12)] + [(y, x, 8) for y in (0, 4) for x in (0, 4)] + \
        [(y, x, 6) for y in (0, 3, 6) for x in (0, 3, 6)]
    for y, x, s in regions:
        v = featmap[:, y:y + s, x:x + s].max(axis=(1, 2))
        total += v / np.linalg.norm(v)
    expected = total / np.linalg.norm(total)
    assert np.allclose(rmac(torch.from_numpy(featmap)).numpy(), expected, atol=1e-6)


def test_rmac_of_a_one_cell_map_is_the_normalised_cell():
    cell = torch.tensor([3.0, 4.0]).view(2, 1, 1)
    assert torch.allclose(rmac(cell), torch.tensor([0.6, 0.8]))


def test_average_and_ten_crop_average():
    maps = torch.arange(2 * 10 * 3 * 4, dtype=torch.float32).view(20, 3, 2, 2)
    per_crop = maps.view(20, 3, 4).mean(-1)
    assert torch.allclose(average(maps), per_crop)
    assert torch.allclose(ten_crop_average(maps), torch.stack([per_crop[:10].mean(0), per_crop[10:].mean(0)]))


def test_rmac_region_vectors_equal_a_direct_loop_over_regions():
    rng = np.random.default_rng(1)
    featmaps = rng.standard_normal((2, 4, 5, 9)).astype(np.float32)
    got = rmac_region_vectors(torch.from_numpy(featmaps)).numpy()
    regions = rmac_regions(5, 9)
    assert got.shape == (2, len(regions), 4)
    for b in range(2):
        for r, (y, x, s) in enumerate(regions):
            v = featmaps[b, :, y:y + s, x:x + s].max(axis=(1, 2))
            assert np.allclose(got[b, r], v / np.linalg.norm(v), atol=1e-6)

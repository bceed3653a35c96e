"""Region features: RoIAlign against independent references, grid cells, box selection, the detector."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vltools.errors import VLToolsError
from vltools.vision.regions import build_detector, grid_boxes, grid_features, roi_features, select_boxes


def _bilinear(fmap: np.ndarray, y: float, x: float) -> np.ndarray:
    """Bilinear sample of (D, H, W) at (y, x) with zero outside, as RoIAlign defines it."""
    _, h, w = fmap.shape
    if y < -1 or y > h or x < -1 or x > w:
        return np.zeros(fmap.shape[0])
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(np.floor(y)), int(np.floor(x))
    y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
    if y0 >= h - 1:
        y0 = y1 = h - 1
        y = float(y0)
    if x0 >= w - 1:
        x0 = x1 = w - 1
        x = float(x0)
    ly, lx = y - y0, x - x0
    return ((1 - ly) * (1 - lx) * fmap[:, y0, x0] + (1 - ly) * lx * fmap[:, y0, x1]
            + ly * (1 - lx) * fmap[:, y1, x0] + ly * lx * fmap[:, y1, x1])


def _reference(fmap: np.ndarray, box: list[float], stride: int) -> np.ndarray:
    """Mean of 14 x 14 bilinear samples spread evenly over the box (7 x 7 bins of 2 x 2), half-pixel aligned."""
    x1, y1, x2, y2 = (v / stride - 0.5 for v in box)
    ys = [y1 + (k + 0.5) * (y2 - y1) / 14 for k in range(14)]
    xs = [x1 + (k + 0.5) * (x2 - x1) / 14 for k in range(14)]
    return np.mean([_bilinear(fmap, y, x) for y in ys for x in xs], axis=0)


def test_roi_features_match_bilinear_crop_and_pool_reference():
    rng = np.random.default_rng(0)
    fmap = rng.standard_normal((4, 6, 8)).astype(np.float32)
    boxes = [[37.0, 21.5, 180.0, 150.0], [0.0, 0.0, 256.0, 192.0], [100.0, 40.0, 110.0, 60.0]]
    got = roi_features(torch.from_numpy(fmap)[None], [torch.tensor(boxes)], stride=32)[0].numpy()
    for row, box in zip(got, boxes, strict=True):
        assert np.allclose(row, _reference(fmap, box, 32), atol=1e-5)


def test_roi_feature_of_a_cell_aligned_box_is_the_crop_mean_for_linear_maps():
    # bilinear sampling is exact on a map linear in (y, x), so the pooled box equals the mean of its cells
    ys, xs = np.meshgrid(np.arange(6), np.arange(8), indexing="ij")
    fmap = np.stack([2.0 * xs + 3.0 * ys + 1.0, -xs + 0.5 * ys]).astype(np.float32)
    box = [2 * 16.0, 1 * 16.0, 7 * 16.0, 5 * 16.0]  # cells x 2..6, y 1..4 at stride 16
    got = roi_features(torch.from_numpy(fmap)[None], [torch.tensor([box])], stride=16)[0][0].numpy()
    assert np.allclose(got, fmap[:, 1:5, 2:7].mean(axis=(1, 2)), atol=1e-5)


def test_grid_boxes_and_features_are_row_major_cells():
    boxes = grid_boxes(2, 3, 32, (64, 80))
    assert boxes.tolist() == [[0, 0, 32, 32], [32, 0, 64, 32], [64, 0, 80, 32],
                              [0, 32, 32, 64], [32, 32, 64, 64], [64, 32, 80, 64]]
    fmap = torch.arange(2 * 2 * 3, dtype=torch.float32).view(2, 2, 3)
    assert torch.equal(grid_features(fmap)[4], fmap[:, 1, 1])


def test_select_boxes_fixed_pads_with_whole_image_and_removes_duplicates():
    boxes = torch.tensor([[0, 0, 10, 10], [0, 0, 10, 10.5], [20, 20, 30, 30]], dtype=torch.float32)
    scores = torch.tensor([0.9, 0.8, 0.5])
    chosen = select_boxes(boxes, scores, (40, 50), num_regions=4, min_regions=1, max_regions=10,
                          score_threshold=0.2)
    assert chosen.tolist() == [[0, 0, 10, 10], [20, 20, 30, 30], [0, 0, 50, 40], [0, 0, 50, 40]]


def test_select_boxes_variable_uses_threshold_within_min_and_max():
    boxes = torch.tensor([[i, i, i + 5, i + 5] for i in range(0, 60, 10)], dtype=torch.float32)
    scores = torch.tensor([0.9, 0.8, 0.7, 0.1, 0.05, 0.01])
    kwargs = {"input_hw": (100, 100), "num_regions": None}
    assert len(select_boxes(boxes, scores, min_regions=1, max_regions=10, score_threshold=0.5, **kwargs)) == 3
    assert len(select_boxes(boxes, scores, min_regions=5, max_regions=10, score_threshold=0.5, **kwargs)) == 5
    assert len(select_boxes(boxes, scores, min_regions=1, max_regions=2, score_threshold=0.5, **kwargs)) == 2
    padded = select_boxes(boxes, scores, min_regions=8, max_regions=10, score_threshold=0.5, **kwargs)
    assert len(padded) == 8 and padded[-1].tolist() == [0, 0, 100, 100]


def test_random_detector_runs_and_returns_sorted_boxes_inside_the_image():
    torch.manual_seed(0)
    detector, described = build_detector("none", min_size=64, max_size=96, candidates=20)
    assert described == "none"
    with torch.inference_mode():
        results = detector([torch.rand(3, 64, 96), torch.rand(3, 64, 80)])
    for (boxes, scores), width in zip(results, (96, 80), strict=True):
        assert boxes.shape[1] == 4 and len(boxes) == len(scores) <= 20
        assert torch.all(scores[:-1] >= scores[1:])
        assert torch.all(boxes[:, 2] <= width) and torch.all(boxes[:, 3] <= 64) and torch.all(boxes >= 0)


def test_detector_imagenet_weights_are_refused():
    with pytest.raises(VLToolsError, match="detection weights"):
        build_detector("imagenet", 64, 96, 10)

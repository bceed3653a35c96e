"""SCO's region rule (r = 50 multi-scale grid windows), the batched RoIAlign crops, and the concept-scores stage."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from vltools.infer.concept_scores import crop_regions, grid_windows
from vltools.io.checkpoints import save_checkpoint
from vltools.io.features import FeaturesReader
from vltools.models.concepts import build_concept_cnn
from vltools.vision.backbones import normalize


def test_default_rule_gives_50_windows():
    windows = grid_windows(60, 90)
    assert windows.shape == (50, 4)
    assert windows[0].tolist() == [0, 0, 90, 60]                     # level 1: the whole image
    # level 2: windows of 2/3 of each side, stride 1/3, row-major
    assert windows[1:5].tolist() == [[0, 0, 60, 40], [30, 0, 90, 40], [0, 20, 60, 60], [30, 20, 90, 60]]
    assert (windows[:, 2] <= 90).all() and (windows[:, 3] <= 60).all()
    assert grid_windows(10, 10, (1, 2, 3)).shape == (14, 4)


def test_crops_of_integer_windows_are_block_averages():
    """A window of 2s x 2s pixels cut to s x s: each output pixel is the mean of its 2 x 2 block."""
    images = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).view(2, 3, 8, 8) % 7
    crops = crop_regions(images, torch.tensor([[0.0, 0.0, 8.0, 8.0]]), 4)
    assert crops.shape == (2, 1, 3, 4, 4)
    torch.testing.assert_close(crops[:, 0], torch.nn.functional.avg_pool2d(images, 2))
    crops = crop_regions(images, torch.tensor([[0.0, 0.0, 4.0, 4.0], [4.0, 2.0, 8.0, 6.0]]), 2)
    torch.testing.assert_close(crops[:, 0], torch.nn.functional.avg_pool2d(images[:, :, 0:4, 0:4], 2))
    torch.testing.assert_close(crops[:, 1], torch.nn.functional.avg_pool2d(images[:, :, 2:6, 4:8], 2))


def test_stage_writes_max_over_regions_of_each_image(tmp_path, vltools_cmd):
    rng = np.random.default_rng(0)
    folder = tmp_path / "images"
    folder.mkdir()
    arrays = {}
    for name in ("a", "b", "c"):
        arrays[name] = rng.integers(0, 255, size=(32, 32, 3), dtype=np.uint8)
        Image.fromarray(arrays[name]).save(folder / f"{name}.png")
    torch.manual_seed(0)
    model, _ = build_concept_cnn("resnet18", "none", 4)
    model.eval()
    save_checkpoint(tmp_path / "cnn.pt", "concepts", {"backbone": "resnet18", "num_concepts": 4},
                    model.state_dict(), vocab=["red", "blue", "star", "two"], schema=1)
    out = tmp_path / "p.h5"
    result = vltools_cmd("concept-scores", folder, "--model", tmp_path / "cnn.pt", "--levels", "1,2", "--image-size",
                         "32", "--crop-size", "16", "--batch-size", "2", "--workers", "0", "--device", "cpu",
                         "-o", out)
    assert result.returncode == 0, result.stderr
    with FeaturesReader(out) as reader:
        assert reader.attrs["global"] == "concepts" and reader.attrs["num_regions"] == 5
        p = reader.read(["a.png", "b.png", "c.png"])["global"]
    for row, name in enumerate("abc"):
        image = normalize(torch.from_numpy(arrays[name]).permute(2, 0, 1)[None])
        with torch.no_grad():   # one image and one window at a time
            boxes = grid_windows(32, 32, (1, 2))
            scores = [torch.sigmoid(model(crop_regions(image, boxes[i:i + 1], 16)[:, 0]))[0] for i in range(5)]
        np.testing.assert_allclose(p[row], torch.stack(scores).max(0).values.numpy(), rtol=1e-4, atol=1e-5)
    bad = vltools_cmd("concept-scores", folder, "--model", tmp_path / "cnn.pt", "--concepts", tmp_path / "none.json",
                      "-o", tmp_path / "q.h5")
    assert bad.returncode == 1 and not (tmp_path / "q.h5").exists()

"""Grad-CAM grounding of a pair's similarity: the map follows the gradient of the top-k contributions."""

from __future__ import annotations

import numpy as np
import torch

from vltools.models import build_model
from vltools.vision.gradcam import overlay, pair_heatmaps, side_by_side
from vltools.vision.pooling import rmac_region_vectors


def test_maps_are_normalised_and_follow_the_top_contributions():
    torch.manual_seed(0)
    model = build_model("rmac", {"backbone": "resnet18", "scales": "1.0"}, 1).eval()
    gen = torch.Generator().manual_seed(1)
    a = torch.randint(0, 256, (3, 64, 96), dtype=torch.uint8, generator=gen)
    b = torch.randint(0, 256, (3, 64, 64), dtype=torch.uint8, generator=gen)
    cam_a, cam_b, similarity = pair_heatmaps(model, a, b, k=5)
    assert cam_a.shape == (64, 96) and cam_b.shape == (64, 64)
    assert cam_a.min() >= 0 and np.isclose(cam_a.max(), 1.0)
    with torch.no_grad():
        phi = model.encode_images(a[None])[0], model.encode_images(b[None])[0]
    assert np.isclose(similarity, float(phi[0] @ phi[1]), atol=1e-5)
    # direct Grad-CAM of image a: gradient of the top-5 contributions with respect to its feature maps
    maps = model.backbone((a[None].float() / 255 - torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
                          / torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)).detach().requires_grad_()
    emb = torch.nn.functional.normalize(model.whiten(rmac_region_vectors(maps, 3)), dim=2).sum(1)
    emb = torch.nn.functional.normalize(emb, dim=1)[0]
    contributions = emb * phi[1]
    contributions[contributions.topk(5).indices].sum().backward()
    cam = torch.relu((maps.grad.mean(dim=(2, 3), keepdim=True) * maps).sum(1, keepdim=True))
    cam = torch.nn.functional.interpolate(cam, size=(64, 96), mode="bilinear", align_corners=False)[0, 0]
    np.testing.assert_allclose(cam_a, (cam / cam.max()).detach().numpy(), atol=1e-4)
    picture = side_by_side(overlay(a, cam_a), overlay(b, cam_b))
    assert picture.size == (96 + 8 + 64, 64)

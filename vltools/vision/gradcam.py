"""Grounding a similarity (Gordo & Larlus Figure 3): Grad-CAM maps of the regions that make two images similar.

For a pair (a, b) embedded by an R-MAC model (`RMAC.embed_with_maps`), the target is the sum of phi_a[j] phi_b[j]
over the k signature dimensions j that contribute most to their dot product; each image's map is Grad-CAM's: the
last convolutional feature maps (first scale) weighted by the spatial mean of the target's gradient with respect
to them, summed over channels, rectified, upsampled to the image and scaled to [0, 1].
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image


def _cam(maps: torch.Tensor, size: tuple[int, int]) -> np.ndarray:
    weights = maps.grad.mean(dim=(2, 3), keepdim=True)
    cam = F.relu((weights * maps).sum(dim=1, keepdim=True)).detach()
    cam = F.interpolate(cam, size=size, mode="bilinear", align_corners=False)[0, 0]
    peak = float(cam.max())
    return (cam / peak).numpy() if peak > 0 else cam.numpy()


def pair_heatmaps(model, image_a: torch.Tensor, image_b: torch.Tensor, k: int = 5) -> tuple[np.ndarray, np.ndarray,
                                                                                             float]:
    """Maps (h, w) in [0, 1] of uint8 (3, h, w) images a and b, and the pair's similarity."""
    model.eval()
    model.zero_grad()
    with torch.enable_grad():
        (phi_a,), maps_a = model.embed_with_maps(image_a[None])
        (phi_b,), maps_b = model.embed_with_maps(image_b[None])
        maps_a.retain_grad()
        maps_b.retain_grad()
        contributions = phi_a * phi_b
        target = contributions[contributions.topk(min(k, len(contributions))).indices].sum()
        target.backward()
    return (_cam(maps_a, tuple(image_a.shape[1:])), _cam(maps_b, tuple(image_b.shape[1:])),
            float(contributions.detach().sum()))


def overlay(image: torch.Tensor, cam: np.ndarray) -> Image.Image:
    """The image with its map in red over it (alpha = 0.6 x map)."""
    rgb = image.permute(1, 2, 0).numpy().astype(np.float32)
    red = np.zeros_like(rgb)
    red[..., 0] = 255
    alpha = 0.6 * cam[..., None]
    return Image.fromarray((rgb * (1 - alpha) + red * alpha).astype(np.uint8))


def side_by_side(left: Image.Image, right: Image.Image, gap: int = 8) -> Image.Image:
    """Two images next to each other on white, tops aligned."""
    canvas = Image.new("RGB", (left.width + gap + right.width, max(left.height, right.height)), (255, 255, 255))
    canvas.paste(left, (0, 0))
    canvas.paste(right, (left.width + gap, 0))
    return canvas

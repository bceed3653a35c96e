"""Image pre-processing of the bottom-up-attention detector (Anderson et al. 2018), as its released code does it.

The released extraction (peteanderson80/bottom-up-attention `lib/fast_rcnn/test.py:_get_blobs`, and the PyTorch
port MILVLG/bottom-up-attention.pytorch `utils/extract_utils.py:get_image_blob`) reads a BGR image with OpenCV,
subtracts the Caffe pixel means (B, G, R) = (102.9801, 115.9465, 122.7717) in float32, and resizes with
`cv2.resize(im, None, fx=s, fy=s, interpolation=INTER_LINEAR)`, where s = 600 / shorter side unless that makes
the longer side round to more than 1000, then s = 1000 / longer side. A batch is zero-padded at the bottom
right to the largest image (detectron2's ImageList with size_divisibility 0: a ResNet C4 needs no multiple).

`resize_like_cv2` reproduces OpenCV's float bilinear resize: the output size is round(n * s), and output pixel
i samples the input at (i + 0.5) / s - 0.5 (clamped to the image), with the scale s itself rather than the ratio
of the rounded sizes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

CAFFE_PIXEL_MEANS_BGR = (102.9801, 115.9465, 122.7717)
TEST_SCALE = 600  # shorter side after resizing (cfg.TEST.SCALES = (600,))
TEST_MAX_SIZE = 1000  # longest side after resizing at most (cfg.TEST.MAX_SIZE)


def caffe_resize_scale(height: int, width: int, scale: int = TEST_SCALE, max_size: int = TEST_MAX_SIZE) -> float:
    """The released resize factor: `scale` / shorter side, or `max_size` / longer side when the longer side
    would round to more than `max_size`."""
    shorter, longer = min(height, width), max(height, width)
    factor = float(scale) / float(shorter)
    if round(factor * longer) > max_size:
        factor = float(max_size) / float(longer)
    return factor


def _linear_taps(size_in: int, size_out: int, factor: float, device: torch.device) -> tuple[torch.Tensor, ...]:
    """OpenCV INTER_LINEAR sampling along one axis: (first index, second index, weight of the second)."""
    position = ((torch.arange(size_out, device=device, dtype=torch.float64) + 0.5) / factor - 0.5).float()
    position = position.clamp(min=0.0)
    first = position.floor().long().clamp(max=size_in - 1)
    weight = (position - first.float()).clamp(min=0.0)
    weight = torch.where(first >= size_in - 1, torch.zeros_like(weight), weight)
    second = (first + 1).clamp(max=size_in - 1)
    return first, second, weight


def resize_like_cv2(image: torch.Tensor, factor: float) -> torch.Tensor:
    """Bilinear resize of a float (C, H, W) image by `factor` as `cv2.resize(fx=factor, fy=factor)` does it for
    float images: output (C, round(H * factor), round(W * factor))."""
    channels, height, width = image.shape
    out_h, out_w = max(1, round(height * factor)), max(1, round(width * factor))
    x0, x1, wx = _linear_taps(width, out_w, factor, image.device)
    y0, y1, wy = _linear_taps(height, out_h, factor, image.device)
    rows = image[:, :, x0] * (1.0 - wx) + image[:, :, x1] * wx  # horizontal pass first, as OpenCV does
    return rows[:, y0, :] * (1.0 - wy)[:, None] + rows[:, y1, :] * wy[:, None]


def prepare_images(images: Sequence[torch.Tensor], channel_order: str = "rgb", scale: int = TEST_SCALE,
                   max_size: int = TEST_MAX_SIZE,
                   pixel_means_bgr: Sequence[float] = CAFFE_PIXEL_MEANS_BGR
                   ) -> tuple[torch.Tensor, list[tuple[int, int]], list[float]]:
    """Images (3, H, W) with values 0..255 (uint8 or float, `channel_order` "rgb" or "bgr") -> the detector's
    input: a (B, 3, H', W') float32 BGR batch minus the pixel means, resized as released and zero-padded at the
    bottom right; with each image's resized (h, w) and its resize factor."""
    if channel_order not in ("rgb", "bgr"):
        raise ValueError(f"channel_order must be 'rgb' or 'bgr', not {channel_order!r}")
    if not images:
        raise ValueError("no images")
    prepared, sizes, factors = [], [], []
    for image in images:
        if image.dim() != 3 or image.shape[0] != 3:
            raise ValueError(f"an image must be (3, H, W), not {tuple(image.shape)}")
        bgr = image.float() if channel_order == "bgr" else image.float().flip(0)
        means = torch.tensor(list(pixel_means_bgr), dtype=torch.float32, device=bgr.device)
        factor = caffe_resize_scale(int(image.shape[1]), int(image.shape[2]), scale, max_size)
        resized = resize_like_cv2(bgr - means[:, None, None], factor)
        prepared.append(resized)
        sizes.append((int(resized.shape[1]), int(resized.shape[2])))
        factors.append(factor)
    height, width = max(h for h, _ in sizes), max(w for _, w in sizes)
    batch = prepared[0].new_zeros((len(prepared), 3, height, width))
    for index, resized in enumerate(prepared):
        batch[index, :, :resized.shape[1], :resized.shape[2]] = resized
    return batch, sizes, factors

"""Foreground masks for L2C: a class's probability from torchvision's FCN ResNet-101, or mask files.

Either way the mask is area-averaged to the backbone feature map's h x w, values in [0, 1]. torchvision is imported
when an FCN is built, not with this module: reading mask files (vision/images.py, which every caption reader
imports) needs none of it, and importing it costs a stage 1.3 s.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from vltools.errors import VLToolsError

VOC_CLASSES = ("background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
               "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train",
               "tvmonitor")
FCN_WEIGHTS = {"coco-voc": "FCN_ResNet101_Weights.COCO_WITH_VOC_LABELS_V1"}


def parse_class(text: str) -> int:
    """A VOC class given as an index (0-20) or a name (`bird`) -> its index."""
    if text.isdigit() and int(text) < len(VOC_CLASSES):
        return int(text)
    if text.lower() in VOC_CLASSES:
        return VOC_CLASSES.index(text.lower())
    raise VLToolsError(f"--class {text!r}: not a VOC class; use an index 0-20 or one of {', '.join(VOC_CLASSES)}")


def area_resize(masks: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """(B, H, W) -> (B, h, w) by area averaging."""
    return F.interpolate(masks.float().unsqueeze(1), size=size, mode="area").squeeze(1)


class ForegroundMask(nn.Module):
    """FCN class probability: normalised images (B, 3, H, W) -> (B, h, w) probability of `class_index`."""

    def __init__(self, fcn: nn.Module, class_index: int) -> None:
        super().__init__()
        self.fcn = fcn
        self.class_index = class_index

    def forward(self, images: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        logits = self.fcn(images)["out"].float()
        return area_resize(logits.softmax(dim=1)[:, self.class_index], size)


def build_fcn(weights: str, class_index: int) -> tuple[ForegroundMask, str]:
    """FCN ResNet-101 with `weights` (`coco-voc`, `none` = random, or a state dict file)."""
    import torchvision

    from vltools.vision.backbones import load_into, load_weights_file, pretrained_state_dict, weights_enum

    fcn = torchvision.models.segmentation.fcn_resnet101(weights=None, weights_backbone=None, num_classes=21,
                                                        aux_loss=False)
    if weights in FCN_WEIGHTS:
        qualified = FCN_WEIGHTS[weights]
        load_into(fcn, pretrained_state_dict(weights_enum(qualified)), qualified, optional=("aux_classifier.",))
        described = f"{weights} ({qualified})"
    elif weights == "none":
        described = "none"
    else:
        load_into(fcn, load_weights_file(Path(weights)), weights, optional=("aux_classifier.",))
        described = weights
    return ForegroundMask(fcn, class_index).eval(), described


def mask_path(folder: Path, image_id: str) -> Path:
    """`DIR/<id without extension>.png`."""
    return folder / PurePosixPath(image_id).with_suffix(".png")


def load_mask(folder: Path, image_id: str) -> torch.Tensor:
    """The mask PNG of `image_id` at its own resolution, (H, W) in [0, 1]: 8-bit values / 255, 0/1 masks as
    they are. Raises OSError (with the file named) when it is missing or unreadable."""
    path = mask_path(folder, image_id)
    if not path.exists():
        raise FileNotFoundError(f"no mask file {path}")
    try:
        with Image.open(path) as image:
            array = np.asarray(image.convert("L") if image.mode not in ("L", "1") else image, dtype=np.float32)
    except (OSError, ValueError) as exc:
        raise OSError(f"unreadable mask file {path} ({exc})") from None
    return torch.from_numpy(array / 255.0 if array.max() > 1 else array)

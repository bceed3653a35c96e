"""Region features: RoIAlign on the backbone's last stage for detector or given boxes, and grid cells.

Boxes here are in pixels of the backbone's (resized) input unless a name says `orig`; they are mapped
back to original-image pixels for storage by dividing by the resize scale.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torchvision
from torch import nn
from torchvision.ops import nms, roi_align

from vltools.errors import VLToolsError
from vltools.vision.backbones import load_into, load_weights_file, pretrained_state_dict, weights_enum

ROI_OUTPUT = 7  # RoIAlign bins per side; the bins are then mean-pooled into one vector per box
ROI_SAMPLING = 2  # bilinear samples per bin per side
CLASS_AGNOSTIC_NMS = 0.7  # removes the same box proposed for several classes
DETECTOR_WEIGHTS = {"coco": "FasterRCNN_ResNet50_FPN_Weights.COCO_V1"}


def roi_features(featmap: torch.Tensor, boxes: list[torch.Tensor], stride: int) -> list[torch.Tensor]:
    """One D-vector per box: RoIAlign (7x7 bins, 2x2 bilinear samples each, pixel-aligned) then the mean.

    `featmap` (B, D, h, w) is the backbone output for inputs of stride `stride`; `boxes[b]` (K_b, 4) are
    x1 y1 x2 y2 in input pixels of image b. Returns a list of (K_b, D) tensors.
    """
    pooled = roi_align(featmap.float(), [b.float() for b in boxes], output_size=ROI_OUTPUT,
                       spatial_scale=1.0 / stride, sampling_ratio=ROI_SAMPLING, aligned=True)
    return list(pooled.mean(dim=(2, 3)).split([len(b) for b in boxes]))


def grid_boxes(grid_h: int, grid_w: int, stride: int, input_hw: tuple[int, int]) -> torch.Tensor:
    """(grid_h * grid_w, 4) cell rectangles in input pixels, row-major, clipped to the input."""
    ys, xs = torch.meshgrid(torch.arange(grid_h), torch.arange(grid_w), indexing="ij")
    boxes = torch.stack([xs, ys, xs + 1, ys + 1], dim=-1).reshape(-1, 4).float() * stride
    boxes[:, 0::2] = boxes[:, 0::2].clamp(max=input_hw[1])
    boxes[:, 1::2] = boxes[:, 1::2].clamp(max=input_hw[0])
    return boxes


def grid_features(featmap: torch.Tensor) -> torch.Tensor:
    """(D, h, w) -> (h * w, D): each last-stage cell is a region, row-major like `grid_boxes`."""
    return featmap.flatten(1).transpose(0, 1)


def select_boxes(boxes: torch.Tensor, scores: torch.Tensor, input_hw: tuple[int, int], num_regions: int | None,
                 min_regions: int, max_regions: int, score_threshold: float) -> torch.Tensor:
    """Top boxes after class-agnostic NMS: exactly `num_regions` when given (padded with the whole-image
    box when the detector found fewer), else those scoring >= score_threshold, at least min_regions and at
    most max_regions (padded with the whole-image box up to min_regions)."""
    keep = nms(boxes.float(), scores.float(), CLASS_AGNOSTIC_NMS)
    boxes, scores = boxes[keep], scores[keep]
    if num_regions is not None:
        count, wanted = min(num_regions, len(boxes)), num_regions
    else:
        count = min(max(int((scores >= score_threshold).sum()), min_regions), max_regions, len(boxes))
        wanted = max(count, min_regions)
    chosen = boxes[:count].float()
    if wanted > count:
        whole = torch.tensor([[0.0, 0.0, float(input_hw[1]), float(input_hw[0])]], device=boxes.device)
        chosen = torch.cat([chosen, whole.expand(wanted - count, 4)])
    return chosen


class Detector(nn.Module):
    """Torchvision Faster R-CNN (ResNet-50 FPN) returning boxes and scores in its input's pixels."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """`images`: float (3, h, w) in [0, 1]; returns (boxes (n, 4), scores (n,)) per image, best first."""
        return [(d["boxes"], d["scores"]) for d in self.model(images)]


def build_detector(weights: str, min_size: int, max_size: int, candidates: int) -> tuple[Detector, str]:
    """Faster R-CNN with `weights` (`coco`, `none` = random, or a state dict file), working at the same
    resolution as the backbone input; keeps up to `candidates` detections of any score."""
    model = torchvision.models.detection.fasterrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, min_size=min_size, max_size=max_size, box_score_thresh=0.0,
        box_detections_per_img=candidates)
    if weights in DETECTOR_WEIGHTS:
        qualified = DETECTOR_WEIGHTS[weights]
        load_into(model, pretrained_state_dict(weights_enum(qualified)), qualified)
        described = f"{weights} ({qualified})"
    elif weights == "none":
        described = "none"
    elif weights == "imagenet":
        raise VLToolsError("--detector-weights imagenet: the detector needs detection weights; use coco, none "
                           "or a Faster R-CNN ResNet-50 FPN state dict file")
    else:
        load_into(model, load_weights_file(Path(weights)), weights)
        described = weights
    return Detector(model).eval(), described

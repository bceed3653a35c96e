"""SCO's multi-label concept CNN (section 3.2): an image backbone with K sigmoid outputs, scored over regions.

The network is a backbone cut at its last convolutional stage (vltools.vision.backbones), global average
pooling and one linear layer to K concept logits. Training reads Eq. 1 as the logistic loss of each concept
with labels in {-1, +1} on the logits, sum_c log(1 + exp(-y'_c z_c)), y' = 2y - 1: the literal form, with
y in {0, 1} and the sigmoid score y^ in [0, 1], is log 2 for every absent concept whatever the score (no
gradient pushes absent concepts down) and bounded for present ones, so it cannot be what was optimised.
That is binary cross-entropy on the logits, summed over concepts (`concept_loss`).

At test time each image's r regions are scored separately with shared weights and the K sigmoid scores are
max-pooled element-wise over the regions (`max_over_regions`), giving the concept score vector p.

Given boxes, the same network scores each box from the trunk's feature map of the whole image (RoIAlign, then the
mean: the region features `extract-regions --regions boxes` reads), which is how `vltools synth-backbone` trains a
backbone to name each object of the synthetic world.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vltools.vision.backbones import build_backbone
from vltools.vision.regions import roi_features


def concept_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Eq. 1 as read above: sum over concepts of log(1 + exp(-(2y - 1) z)), mean over the batch."""
    return F.binary_cross_entropy_with_logits(logits, targets, reduction="sum") / logits.size(0)


def max_over_regions(scores: torch.Tensor) -> torch.Tensor:
    """Element-wise max of region score vectors [B, r, K] -> [B, K]."""
    return scores.max(dim=1).values


class ConceptCNN(nn.Module):
    """Backbone trunk -> global average pool (or RoIAlign over boxes) -> Linear(dim, K): concept logits of whole
    images, regions or boxes; `stride` is the trunk's (input pixels per feature-map cell)."""

    DEFAULTS = {"backbone": "vgg19", "num_concepts": 256}

    def __init__(self, trunk: nn.Module, dim: int, num_concepts: int, stride: int = 32) -> None:
        super().__init__()
        self.trunk = trunk
        self.stride = stride
        self.classifier = nn.Linear(dim, num_concepts)

    def forward(self, images: torch.Tensor, boxes: list[torch.Tensor] | None = None) -> torch.Tensor:
        """Logits [B, K] of normalised images [B, 3, S, S]; with `boxes` (per image a (K_b, 4) tensor of x1 y1 x2 y2
        in input pixels), logits [sum of K_b, K] of each box's RoI-pooled features instead, image by image."""
        features = self.trunk(images)
        if boxes is None:
            return self.classifier(features.mean(dim=(2, 3)))
        return self.classifier(torch.cat(roi_features(features, boxes, self.stride)))

    def region_scores(self, crops: torch.Tensor, chunk: int = 256) -> torch.Tensor:
        """Concept scores p [B, K] of region crops [B, r, 3, S, S]: sigmoid of every region's logits (all the
        batch's regions through the network together, `chunk` crops a pass), max over each image's regions."""
        b, r = crops.shape[:2]
        flat = crops.flatten(0, 1)
        logits = torch.cat([self(flat[i:i + chunk]) for i in range(0, len(flat), chunk)])
        return max_over_regions(torch.sigmoid(logits.float()).view(b, r, -1))


def build_concept_cnn(backbone: str, weights: str, num_concepts: int) -> tuple[ConceptCNN, str]:
    """A concept CNN on the torchvision `backbone` with `weights` (imagenet, none or PATH), and their description."""
    trunk, described = build_backbone(backbone, weights)
    return ConceptCNN(trunk.trunk, trunk.dim, num_concepts, trunk.stride), described

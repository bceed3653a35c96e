"""Gordo & Larlus (CVPR 2017): a trainable R-MAC image embedding phi and the tf-idf text embedding theta.

phi(image): for each scale s, the image resized by s -> a torchvision ResNet cut after its last stage -> the R-MAC
regions (max-pooled, l2-normalised) -> one PCA-whitening shared by all regions, as a linear layer initialised from
data (`init_whitening`) -> l2-normalised; the region vectors of every scale summed -> l2-normalised. `grid` is how
the regions are placed (vltools.vision.pooling.RMAC_GRIDS): "floor", Tolias et al.'s reference, by default; a
checkpoint from before the setting existed is read with the grid it was trained on (`FORMER_DEFAULTS`).
theta(t) = l2norm(W^T t) for an l2-normalised tf-idf vector t (only when the model has a text branch).
A query given as an image and a text is l2norm(phi + theta) (`joint`). Similarities are dot products.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vltools.errors import VLToolsError
from vltools.vision.backbones import BACKBONES, build_backbone, normalize
from vltools.vision.pooling import RMAC_GRIDS, rmac_region_vectors

# when issue 23's floored grid landed (commit 9422e6a): R-MAC checkpoints recorded neither their grid nor, until
# 2f20fbd, a config schema, so one without a schema written before this time was trained on the rounded grid
FLOOR_GRID_LANDED = "2026-11-24T18:35:10+00:00"


def parse_scales(text: str) -> list[float]:
    """"1.0,0.7071" -> [1.0, 0.7071]."""
    scales = [float(part) for part in str(text).split(",") if part.strip()]
    if not scales or min(scales) <= 0:
        raise ValueError(f"scales {text!r}: give positive numbers separated by commas")
    return scales


def pca_whitening(vectors: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight, bias) with weight @ (x - mean) = PCA-whitened x: rows are the covariance's eigenvectors divided by
    sqrt(eigenvalue + eps * largest eigenvalue), largest eigenvalue first; bias = -weight @ mean."""
    data = vectors.double()
    mean = data.mean(dim=0)
    centred = data - mean
    covariance = centred.T @ centred / max(1, len(data))
    values, vectors_ = torch.linalg.eigh(covariance)
    values, vectors_ = values.flip(0), vectors_.flip(1)
    scale = (values.clamp(min=0) + eps * values.max().clamp(min=1e-12)).rsqrt()
    weight = scale[:, None] * vectors_.T
    return weight.float(), (-weight @ mean).float()


class RMAC(nn.Module):
    """The R-MAC embedding network (and, with `vocab_size` > 0 and `text`, the text branch)."""

    separable = True
    DEFAULTS: dict = {"backbone": "resnet101", "levels": 3, "scales": "1.0,0.7071", "text": False, "frozen_bn": True,
                      "grid": "floor"}
    # config schema (vltools.models.checkpoint_config): a checkpoint without `grid` and without a recorded schema
    # (written before 2f20fbd) meant the rounded grid unless it was created after the floored one landed; one with
    # schema 1 recorded was written after both and meant today's "floor"
    FORMER_DEFAULTS: dict[str, tuple[int, object] | tuple[int, object, str]] = {
        "grid": (1, "round", FLOOR_GRID_LANDED)}

    def __init__(self, vocab_size: int, backbone: str, levels: int, scales: str, text: bool, frozen_bn: bool,
                 grid: str = "floor") -> None:
        super().__init__()
        self.frozen_bn = frozen_bn
        if backbone not in BACKBONES:
            raise ValueError(f"unknown backbone {backbone!r}")
        if grid not in RMAC_GRIDS:
            raise VLToolsError(f"model.grid must be one of {', '.join(RMAC_GRIDS)}, not {grid!r}")
        self.levels, self.scales, self.grid = levels, parse_scales(scales), grid
        self.backbone = build_backbone(backbone, "none")[0]
        self.dim = BACKBONES[backbone].dim
        self.whiten = nn.Linear(self.dim, self.dim)
        nn.init.eye_(self.whiten.weight)
        nn.init.zeros_(self.whiten.bias)
        self.text = nn.Linear(vocab_size, self.dim, bias=False) if text else None

    def train(self, mode: bool = True) -> RMAC:
        """With `frozen_bn` (pretrained backbones), BatchNorm statistics stay frozen (eval mode) in training, as in
        Gordo et al.'s end-to-end R-MAC: triplet batches are too small and too correlated to estimate them."""
        super().train(mode)
        for module in self.backbone.modules() if self.frozen_bn else ():
            if isinstance(module, nn.BatchNorm2d):
                module.eval()
        return self

    def scale_regions(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 (B, 3, H, W) images of one size -> (B, R, D) region vectors of every scale, before whitening."""
        return torch.cat([rmac_region_vectors(self.backbone(self._scaled(images, scale)), self.levels, self.grid)
                          for scale in self.scales], dim=1)

    def _scaled(self, images: torch.Tensor, scale: float) -> torch.Tensor:
        x = normalize(images)
        if scale != 1.0:
            size = (max(1, round(x.shape[2] * scale)), max(1, round(x.shape[3] * scale)))
            x = F.interpolate(x, size=size, mode="bilinear", align_corners=False, antialias=True)
        return x

    def embed_with_maps(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 (B, 3, H, W) images of one size -> (l2-normalised (B, D) phi, the backbone's feature maps at the
        first scale, which Grad-CAM weighs)."""
        total, first = 0, None
        for scale in self.scales:
            maps = self.backbone(self._scaled(images, scale))
            first = maps if first is None else first
            regions = rmac_region_vectors(maps, self.levels, self.grid)
            total = total + F.normalize(self.whiten(regions), dim=2).sum(dim=1)
        return F.normalize(total, dim=1), first

    def embed_same_size(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 (B, 3, H, W) images of one size -> l2-normalised (B, D) phi."""
        return self.embed_with_maps(images)[0]

    def encode_images(self, images: torch.Tensor, sizes: torch.Tensor | None = None) -> torch.Tensor:
        """phi of a batch: uint8 (B, 3, H, W), images of different sizes padded at the bottom right and their
        (h, w) in `sizes` -> (B, D) in batch order."""
        if sizes is None:
            return self.embed_same_size(images)
        out = [None] * len(images)
        groups: dict[tuple[int, int], list[int]] = {}
        for i, (h, w) in enumerate(sizes.tolist()):
            groups.setdefault((h, w), []).append(i)
        for (h, w), members in groups.items():
            embedded = self.embed_same_size(images[members, :, :h, :w])
            for row, i in zip(embedded, members, strict=True):
                out[i] = row
        return torch.stack(out)

    def encode_texts(self, tfidf: torch.Tensor) -> torch.Tensor:
        """theta: (B, V) l2-normalised tf-idf vectors -> l2norm(W^T t), (B, D)."""
        if self.text is None:
            raise ValueError("this model has no text branch (trained without text)")
        return F.normalize(self.text(tfidf), dim=1)

    def forward(self, images: torch.Tensor, sizes: torch.Tensor | None = None,
                tfidf: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Training: (phi of the images, theta of the texts or None)."""
        return self.encode_images(images, sizes), None if tfidf is None else self.encode_texts(tfidf)


def joint(image_emb: torch.Tensor, text_emb: torch.Tensor) -> torch.Tensor:
    """A query of an image and a text (V+T at test time, and text modifiers): l2norm(phi + theta)."""
    return F.normalize(image_emb + text_emb, dim=-1)

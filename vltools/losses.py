"""Ranking losses for image-caption matching."""

from __future__ import annotations

import torch


def hardest_negative_loss(sims: torch.Tensor, margin: float = 0.2, max_violation: bool = True,
                          positive_mask: torch.Tensor | None = None) -> torch.Tensor:
    """VSE++ hinge loss on a batch's score matrix, summed over both directions.

    sims[i, j] scores image i against caption j; pair i's positive is sims[i, i].  For each image the
    hinge `margin + sims[i, j] - sims[i, i]` runs over captions j, for each caption the hinge
    `margin + sims[i, j] - sims[j, j]` over images i; with `max_violation` only the hardest negative
    counts (else all negatives are summed).  `positive_mask[i, j]` True marks image i and caption j as
    belonging together (e.g. the same image twice in a batch): those are never negatives.
    """
    n = sims.size(0)
    positives = torch.eye(n, dtype=torch.bool, device=sims.device)
    if positive_mask is not None:
        positives = positives | positive_mask.to(device=sims.device, dtype=torch.bool)
    diagonal = sims.diagonal()
    cost_caption = (margin + sims - diagonal.unsqueeze(1)).clamp(min=0).masked_fill(positives, 0)
    cost_image = (margin + sims - diagonal.unsqueeze(0)).clamp(min=0).masked_fill(positives, 0)
    if max_violation:
        return cost_caption.max(dim=1).values.sum() + cost_image.max(dim=0).values.sum()
    return cost_caption.sum() + cost_image.sum()

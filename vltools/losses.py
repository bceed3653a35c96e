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


def sample_negatives(positives: torch.Tensor, count: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """A bool mask [B, B] choosing, in each row, `count` columns uniformly at random among those not marked in
    `positives` (all of them when a row has fewer)."""
    noise = torch.rand(positives.shape, generator=generator, device="cpu").to(positives.device)
    noise = noise.masked_fill(positives, -1.0)
    keep = min(count, positives.size(1))
    chosen = torch.zeros_like(positives)
    chosen.scatter_(1, noise.topk(keep, dim=1).indices, True)
    return chosen & ~positives


def sampled_hinge_loss(sims: torch.Tensor, margin: float = 0.2, negatives: int = 128,
                       positive_mask: torch.Tensor | None = None,
                       generator: torch.Generator | None = None) -> torch.Tensor:
    """SCO's structured objective: sum over matched pairs i and `negatives` mismatched pairs each of
    max(0, m - s_ii + s_ik) + max(0, m - s_ii + s_ki).

    sims[i, k] scores image i against caption k (the batch's matched pairs on the diagonal). For each pair i the
    k of the first term are `negatives` captions drawn from the batch's other captions, those of the second
    `negatives` images drawn independently; `positive_mask[i, k]` True (the same image twice in a batch) is never
    a negative. A batch with fewer mismatched items uses all of them.
    """
    n = sims.size(0)
    positives = torch.eye(n, dtype=torch.bool, device=sims.device)
    if positive_mask is not None:
        positives = positives | positive_mask.to(device=sims.device, dtype=torch.bool)
    diagonal = sims.diagonal()
    caption_terms = (margin - diagonal.unsqueeze(1) + sims).clamp(min=0)
    image_terms = (margin - diagonal.unsqueeze(0) + sims).clamp(min=0)
    caption_negatives = sample_negatives(positives, negatives, generator)
    image_negatives = sample_negatives(positives.t(), negatives, generator).t()
    return caption_terms[caption_negatives].sum() + image_terms[image_negatives].sum()

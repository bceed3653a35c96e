"""Ranking losses: image-caption matching (VSE++) and semantic image retrieval triplets (Gordo & Larlus)."""

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


def triplet_loss(anchor: torch.Tensor, positive: torch.Tensor, negative: torch.Tensor,
                 margin: float) -> torch.Tensor:
    """Gordo & Larlus Eqs. 1-3: mean over triplets of 1/2 max(0, m - a.p + a.n) (rows of [B, D] embeddings)."""
    return 0.5 * (margin - (anchor * positive).sum(1) + (anchor * negative).sum(1)).clamp(min=0).mean()


SEMANTIC_LOSSES = ("v", "vt", "wsabie")


def semantic_loss(kind: str, image: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                  text: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None, margin: float) -> torch.Tensor:
    """The losses of Gordo & Larlus on (query, relevant, irrelevant) triplets: `v` L_v (Eq. 1), `vt`
    L_v + L_t1 + L_t2 (Eqs. 1-3), `wsabie` L_t1 alone (Eq. 2). `image` = (phi_q, phi_+, phi_-), `text` the thetas."""
    phi_q, phi_p, phi_n = image
    if kind == "v":
        return triplet_loss(phi_q, phi_p, phi_n, margin)
    if text is None:
        raise ValueError(f"loss {kind!r} needs the text embeddings")
    theta_q, theta_p, theta_n = text
    text_to_image = triplet_loss(phi_q, theta_p, theta_n, margin)
    if kind == "wsabie":
        return text_to_image
    if kind == "vt":
        return triplet_loss(phi_q, phi_p, phi_n, margin) + text_to_image + triplet_loss(theta_q, phi_p, phi_n, margin)
    raise ValueError(f"unknown loss {kind!r}; use one of {', '.join(SEMANTIC_LOSSES)}")

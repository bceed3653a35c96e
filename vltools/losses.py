"""Losses: ranking losses for image-caption matching (VSE++) and semantic image retrieval triplets (Gordo &
Larlus), and the captioners' sequence likelihoods.

Captioning usage: with `logp = decoder(cond, tokens)` ([B, L-1, V], see vltools.models.decoder) and
`targets = tokens[:, 1:]` (`w1 .. wn <end> <pad> ..`),

    sequence_logprob(logp, targets)        # [B] log p(c | I): sum over the words and <end>, pads masked
    sequence_cross_entropy(logp, targets)  # scalar: the MLE token cross-entropy (mean over real tokens)
    l2c_loss(pair_logp, pair_targets, tv, single_logp, single_targets)   # L2C's Eq. 6 (sums over tokens)

Every captioning objective (MLE, CL, SCO's generation loss, L2C's Eq. 6) goes through the first two.
"""

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


def sequence_logprob(logp: torch.Tensor, targets: torch.Tensor, pad: int = 0) -> torch.Tensor:
    """log p(c | I) of each caption [B]: the sum of log p(target token) over its tokens, `<end>` included.

    `logp` [B, T, V] are the decoder's log-probabilities for each position, `targets` [B, T] the tokens
    to score (the caption shifted past `<start>`); positions holding `pad` add nothing.
    """
    picked = logp.gather(2, targets.unsqueeze(2)).squeeze(2)
    return picked.masked_fill(targets == pad, 0.0).sum(1)


def sequence_cross_entropy(logp: torch.Tensor, targets: torch.Tensor, pad: int = 0,
                           reduction: str = "token") -> torch.Tensor:
    """The captioners' token cross-entropy: -sum log p(target) over real tokens (`<end>` included), divided
    by the number of real tokens (`reduction="token"`, ImageCaptioning.pytorch's LanguageModelCriterion), by
    the number of captions (`"caption"`), or not at all (`"sum"`)."""
    total = -sequence_logprob(logp, targets, pad).sum()
    if reduction == "sum":
        return total
    if reduction == "caption":
        return total / targets.size(0)
    if reduction == "token":
        return total / (targets != pad).sum().clamp(min=1)
    raise ValueError(f"reduction must be token, caption or sum, not {reduction!r}")


def contrastive_objective(target_pos: torch.Tensor, reference_pos: torch.Tensor, target_neg: torch.Tensor,
                          reference_neg: torch.Tensor, nu: float = 1.0, positive: bool = True,
                          negative: bool = True) -> torch.Tensor:
    """J(theta) of Dai & Lin's Contrastive Learning (eqs. 7-10), to be maximised; returns the scalar J.

    `target_pos`, `reference_pos` [T_m]: ln p_m(c_t | I_t) and ln p_n(c_t | I_t) of the positive pairs;
    `target_neg`, `reference_neg` [K, T_n]: the same for the K negative sets (c_/t, I_t). With
    G = ln p_m - ln p_n (eq. 7) and h = r_nu(G) = 1 / (1 + nu exp(-G)) (eqs. 3, 8),
    L_k = sum_t ln h(pos_t) + sum_t ln(1 - h(neg_kt)) (eq. 9) and J = (1/K)(1/T_m) sum_k L_k (eq. 10).
    `positive` / `negative` False drop the first / second term of eq. 9 (CL(N) / CL(P) of Table 4).
    """
    shift = torch.log(torch.as_tensor(nu, dtype=target_pos.dtype, device=target_pos.device))
    k, t_m = target_neg.size(0), target_pos.size(0)
    total = target_pos.new_zeros(())
    if positive:     # the positive pairs are the same in each of the K copies of X
        total = total + k * torch.nn.functional.logsigmoid(target_pos - reference_pos - shift).sum()
    if negative:     # ln(1 - r_nu(G)) = ln sigmoid(-(G - ln nu))
        total = total + torch.nn.functional.logsigmoid(-(target_neg - reference_neg - shift)).sum()
    return total / (k * t_m)


def l2c_loss(pair_logp: torch.Tensor, pair_targets: torch.Tensor, tv: torch.Tensor,
             single_logp: torch.Tensor | None = None, single_targets: torch.Tensor | None = None,
             tv_weight: float = 1.0, pad: int = 0) -> torch.Tensor:
    """L2C's Eq. 6, L_diff + L_single + lambda L_TV. L_diff and L_single are Eqs. 4-5, -sum_t log P(y_t) summed
    over a sentence's tokens (`<end>` included), each averaged over its batch's sentences (the paper writes one
    sentence's loss, so a batch of 16 pairs and one of 128 single images weigh alike); L_TV is Eq. 2 of each
    image, `tv` [N], averaged over the step's images. Without `single_logp` (pairs only) L_single is absent."""
    total = sequence_cross_entropy(pair_logp, pair_targets, pad, reduction="caption")
    if single_logp is not None:
        total = total + sequence_cross_entropy(single_logp, single_targets, pad, reduction="caption")
    return total + tv_weight * tv.mean()


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

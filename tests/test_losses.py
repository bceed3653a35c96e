"""The VSE++ hardest-negative hinge loss against a brute-force loop."""

from __future__ import annotations

import pytest
import torch

from vltools.losses import hardest_negative_loss, sample_negatives, sampled_hinge_loss


def brute_force(sims, margin, max_violation, positive):
    n = len(sims)
    total = 0.0
    for i in range(n):          # image i: its caption i against every caption that is not its own
        costs = [max(0.0, margin + sims[i][j] - sims[i][i]) for j in range(n) if not positive[i][j] and j != i]
        total += (max(costs, default=0.0) if max_violation else sum(costs))
    for j in range(n):          # caption j: its image j against every image it does not belong to
        costs = [max(0.0, margin + sims[i][j] - sims[j][j]) for i in range(n) if not positive[i][j] and i != j]
        total += (max(costs, default=0.0) if max_violation else sum(costs))
    return total


@pytest.mark.parametrize("max_violation", [True, False])
@pytest.mark.parametrize("use_mask", [False, True])
def test_loss_matches_brute_force(max_violation, use_mask):
    gen = torch.Generator().manual_seed(0)
    sims = torch.rand(7, 7, generator=gen, dtype=torch.float64)
    positive = torch.zeros(7, 7, dtype=torch.bool)
    if use_mask:   # pairs 1 and 4 show the same image, so caption 4 is a positive of image 1 and vice versa
        positive[1, 4] = positive[4, 1] = True
        positive[2, 6] = positive[6, 2] = True
        sims[1, 4] = sims[4, 1] = sims[2, 6] = 1.5   # would be the hardest negatives if not masked
    loss = hardest_negative_loss(sims, margin=0.2, max_violation=max_violation,
                                 positive_mask=positive if use_mask else None)
    expected = brute_force(sims.tolist(), 0.2, max_violation, positive.tolist())
    assert loss.item() == pytest.approx(expected, abs=1e-12)
    if use_mask:
        unmasked = hardest_negative_loss(sims, margin=0.2, max_violation=max_violation)
        assert unmasked.item() != pytest.approx(loss.item())


def test_loss_is_zero_when_positives_win_by_the_margin_and_has_gradients():
    sims = torch.full((4, 4), 0.1).fill_diagonal_(0.9).requires_grad_()
    assert hardest_negative_loss(sims).item() == 0.0
    sims = torch.rand(4, 4, generator=torch.Generator().manual_seed(1)).requires_grad_()
    hardest_negative_loss(sims).backward()
    assert sims.grad.abs().sum() > 0


def brute_force_sampled(sims, margin, caption_negatives, image_negatives):
    """Section 3.4 written out: for each matched pair i, the chosen mismatched captions k and images k."""
    n = len(sims)
    total = 0.0
    for i in range(n):
        for k in range(n):
            if caption_negatives[i][k]:
                total += max(0.0, margin - sims[i][i] + sims[i][k])
            if image_negatives[k][i]:
                total += max(0.0, margin - sims[i][i] + sims[k][i])
    return total


def test_sampled_hinge_over_exactly_128_negatives():
    """A batch of 129 distinct images: every other item is one of the 128 negatives, in both directions."""
    gen = torch.Generator().manual_seed(1)
    sims = torch.rand(129, 129, generator=gen, dtype=torch.float64) * 0.4
    loss = sampled_hinge_loss(sims, margin=0.2, negatives=128, generator=torch.Generator().manual_seed(0))
    s = sims.tolist()
    expected = sum(max(0.0, 0.2 - s[i][i] + s[i][k]) + max(0.0, 0.2 - s[i][i] + s[k][i])
                   for i in range(129) for k in range(129) if k != i)
    assert loss.item() == pytest.approx(expected, rel=1e-12)


def test_sampled_negatives_are_128_non_positives_per_row():
    positives = torch.eye(300, dtype=torch.bool)
    positives[0, 5] = positives[5, 0] = True
    chosen = sample_negatives(positives, 128, torch.Generator().manual_seed(3))
    assert chosen.sum(1).tolist() == [128] * 300
    assert not (chosen & positives).any()
    fewer = sample_negatives(torch.eye(10, dtype=torch.bool), 128)
    assert fewer.sum(1).tolist() == [9] * 10


def test_sampled_hinge_matches_brute_force_on_its_draw():
    """With more candidates than negatives, the loss is the brute-force sum over the same random draw."""
    sims = torch.rand(200, 200, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 0.5
    same = torch.zeros(200, 200, dtype=torch.bool)
    same[3, 4] = same[4, 3] = True
    loss = sampled_hinge_loss(sims, 0.2, 128, positive_mask=same, generator=torch.Generator().manual_seed(7))
    replay = torch.Generator().manual_seed(7)
    positives = torch.eye(200, dtype=torch.bool) | same
    caption_negatives = sample_negatives(positives, 128, replay)
    image_negatives = sample_negatives(positives.t(), 128, replay).t()
    assert image_negatives.sum(0).tolist() == [128] * 200
    expected = brute_force_sampled(sims.tolist(), 0.2, caption_negatives.tolist(), image_negatives.tolist())
    assert loss.item() == pytest.approx(expected, rel=1e-12)

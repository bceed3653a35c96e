"""The VSE++ hardest-negative hinge loss against a brute-force loop."""

from __future__ import annotations

import pytest
import torch

from vltools.losses import hardest_negative_loss


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


def test_sequence_logprob_and_cross_entropy_by_hand():
    from vltools.losses import sequence_cross_entropy, sequence_logprob

    probs = torch.tensor([[[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25], [0.7, 0.1, 0.1, 0.1]],
                          [[0.1, 0.1, 0.1, 0.7], [0.4, 0.1, 0.4, 0.1], [0.5, 0.2, 0.2, 0.1]]], dtype=torch.float64)
    targets = torch.tensor([[3, 2, 0], [1, 2, 0]])    # word 3 then <end> (2); word 1 then <end>; pads last
    logp = sequence_logprob(probs.log(), targets)
    expected = torch.tensor([0.4 * 0.25, 0.1 * 0.4], dtype=torch.float64).log()
    torch.testing.assert_close(logp, expected)
    assert sequence_cross_entropy(probs.log(), targets).item() == pytest.approx(-expected.sum().item() / 4)
    assert sequence_cross_entropy(probs.log(), targets, reduction="caption").item() == \
        pytest.approx(-expected.sum().item() / 2)
    assert sequence_cross_entropy(probs.log(), targets, reduction="sum").item() == pytest.approx(-expected.sum().item())

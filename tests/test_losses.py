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


def _triplets(seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.functional.normalize(torch.randn(6, 5, generator=gen, dtype=torch.float64), dim=1)
            for _ in range(3)]


def _hinge(a, p, n, m):
    return sum(0.5 * max(0.0, m - float(a[i] @ p[i]) + float(a[i] @ n[i])) for i in range(len(a))) / len(a)


@pytest.mark.parametrize("kind", ["v", "vt", "wsabie"])
def test_semantic_losses_match_the_paper_equations(kind):
    from vltools.losses import semantic_loss

    phi, theta, m = _triplets(1), _triplets(2), 0.7
    eq1 = _hinge(phi[0], phi[1], phi[2], m)                # L_v: image query, image relevant / irrelevant
    eq2 = _hinge(phi[0], theta[1], theta[2], m)            # L_t1: image query, their texts
    eq3 = _hinge(theta[0], phi[1], phi[2], m)              # L_t2: text query, images
    expected = {"v": eq1, "vt": eq1 + eq2 + eq3, "wsabie": eq2}[kind]
    got = semantic_loss(kind, tuple(phi), tuple(theta), m)
    assert float(got) == pytest.approx(expected, rel=1e-12)
    assert expected > 0

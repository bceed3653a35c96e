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


def direct_cl(pos_m, pos_n, neg_m, neg_n, nu):
    """Eqs. (7)-(10) written out with math on Python floats."""
    import math

    def h(log_pm, log_pn):
        return 1.0 / (1.0 + nu * math.exp(-(log_pm - log_pn)))

    total = 0.0
    for k in range(len(neg_m)):
        total += sum(math.log(h(a, b)) for a, b in zip(pos_m, pos_n, strict=True))
        total += sum(math.log(1.0 - h(a, b)) for a, b in zip(neg_m[k], neg_n[k], strict=True))
    return total / len(neg_m) / len(pos_m)


@pytest.mark.parametrize("nu", [1.0, 2.0])
def test_contrastive_objective_equals_equations_7_to_10(nu):
    from vltools.losses import contrastive_objective

    # caption log-probabilities, each a sum over words and <end> (e.g. -2.0 = ln p(w1) + ln p(<end>) = -1.5 - 0.5)
    pos_m, pos_n = [-2.0, -7.5, -4.0], [-3.0, -7.0, -4.0]
    neg_m = [[-9.0, -6.0, -12.0], [-5.0, -8.0, -10.0], [-11.0, -6.5, -9.5], [-7.0, -7.0, -7.0],
             [-6.0, -13.0, -8.0]]                                      # K = 5 negative sets
    neg_n = [[-8.0, -6.5, -11.0], [-5.5, -8.0, -9.0], [-10.0, -7.0, -9.0], [-6.0, -7.5, -8.0],
             [-6.5, -12.0, -8.5]]
    def t(values):
        return torch.tensor(values, dtype=torch.float64)

    j = contrastive_objective(t(pos_m), t(pos_n), t(neg_m), t(neg_n), nu=nu)
    assert j.item() == pytest.approx(direct_cl(pos_m, pos_n, neg_m, neg_n, nu), rel=1e-12)
    # CL(P) and CL(N): the two halves of eq. (9)
    only_p = contrastive_objective(t(pos_m), t(pos_n), t(neg_m), t(neg_n), nu=nu, negative=False)
    only_n = contrastive_objective(t(pos_m), t(pos_n), t(neg_m), t(neg_n), nu=nu, positive=False)
    assert (only_p + only_n).item() == pytest.approx(j.item(), rel=1e-12)
    import math
    assert only_p.item() == pytest.approx(sum(math.log(1 / (1 + nu * math.exp(-(a - b))))
                                              for a, b in zip(pos_m, pos_n, strict=True)) / 3, rel=1e-12)


def test_contrastive_gradient_is_not_zero_when_target_and_reference_are_identical():
    """Section 4.3: with p_m = p_n, G = 0 and h = 1/2 everywhere, yet dJ/dtheta != 0."""
    from vltools.losses import contrastive_objective

    pos = torch.tensor([-3.0, -5.0], requires_grad=True)
    neg = torch.tensor([[-4.0, -6.0]], requires_grad=True)
    j = contrastive_objective(pos, pos.detach(), neg, neg.detach())
    j.backward()
    assert j.item() == pytest.approx(2 * -0.6931471805599453)   # (2 + 2) terms of ln(1/2), divided by K T_m = 2
    torch.testing.assert_close(pos.grad, torch.tensor([0.25, 0.25]))          # d ln sigmoid(G) / dG / T_m
    torch.testing.assert_close(neg.grad, torch.tensor([[-0.25, -0.25]]))

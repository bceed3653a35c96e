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


def test_l2c_loss_sums_tokens_and_weighs_tv_by_lambda_as_eqs_4_to_6():
    import math

    from vltools.losses import l2c_loss

    # pairs: sentence 1 = word 1 (p 0.5) then <end> 2 (p 0.8); sentence 2 = <end> (p 0.5); 0 = <pad>
    pair_probs = torch.tensor([[[0.2, 0.5, 0.3], [0.1, 0.1, 0.8]],
                               [[0.25, 0.25, 0.5], [0.6, 0.2, 0.2]]], dtype=torch.float64)
    pair_targets = torch.tensor([[1, 2], [2, 0]])
    # single images: word 1 (p 1/4), word 1 (p 1/2), <end> (p 1/8); and <end> at once (p 1)
    single_probs = torch.tensor([[[0.25, 0.25, 0.5], [0.25, 0.5, 0.25], [0.5, 0.375, 0.125]],
                                 [[0.0, 0.0, 1.0], [0.5, 0.25, 0.25], [0.5, 0.25, 0.25]]], dtype=torch.float64)
    single_targets = torch.tensor([[1, 1, 2], [2, 0, 0]])
    tv = torch.tensor([2.0, 4.0, 0.5, 1.5], dtype=torch.float64)     # Eq. 2 of each image: mean 2
    # Eq. 4: (ln 2 + ln 1.25) + ln 2 per sentence, averaged over 2 pairs; Eq. 5: (ln 4 + ln 2 + ln 8) + 0 over 2
    l_diff = (2 * math.log(2) + math.log(1.25)) / 2
    l_single = 6 * math.log(2) / 2
    loss = l2c_loss(pair_probs.log(), pair_targets, tv, single_probs.log(), single_targets)
    assert loss.item() == pytest.approx(l_diff + l_single + 1.0 * 2.0, rel=1e-12)          # 4.884...
    assert loss.item() == pytest.approx(4 * math.log(2) + 0.5 * math.log(1.25) + 2.0, rel=1e-12)
    # token means (3 pair tokens, 4 single tokens) would give (2 ln 2 + ln 1.25) / 3 + 6 ln 2 / 4 + tv: not this
    assert abs(loss.item() - ((2 * math.log(2) + math.log(1.25)) / 3 + 1.5 * math.log(2) + 2.0)) > 1.0
    half = l2c_loss(pair_probs.log(), pair_targets, tv, single_probs.log(), single_targets, tv_weight=0.5)
    assert half.item() == pytest.approx(l_diff + l_single + 1.0, rel=1e-12)
    pairs_only = l2c_loss(pair_probs.log(), pair_targets, tv[:2])
    assert pairs_only.item() == pytest.approx(l_diff + 3.0, rel=1e-12)


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

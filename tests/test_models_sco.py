"""SCO's gated fusion against Eq. 2 computed by hand, the ablation variants, and the sentence encoder."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vltools.models.sco import SCO, GatedFusion


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def numpy_eq2(fusion: GatedFusion, p: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Eq. 2 in numpy with the module's weights."""
    W_l, W_g = fusion.W_l.weight.detach().double().numpy(), fusion.W_g.weight.detach().double().numpy()
    U_l, U_g = fusion.U_l.weight.detach().double().numpy(), fusion.U_g.weight.detach().double().numpy()
    p_hat, x_hat = unit(p @ W_l.T), unit(x @ W_g.T)
    t = 1 / (1 + np.exp(-(p @ U_l.T + x @ U_g.T)))
    return t * p_hat + (1 - t) * x_hat


def test_gated_fusion_is_eq2():
    torch.manual_seed(0)
    fusion = GatedFusion(concept_dim=6, context_dim=5, embed_size=4).double()
    rng = np.random.default_rng(0)
    p, x = rng.random((3, 6)), rng.normal(size=(3, 5))
    got = fusion(torch.from_numpy(p), torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(got, numpy_eq2(fusion, p, x), rtol=1e-12)


def test_gated_fusion_by_hand():
    """One image, 2 concepts, 2 context dims, H = 2, weights chosen so every step is checkable on paper."""
    fusion = GatedFusion(2, 2, 2).double()
    with torch.no_grad():
        fusion.W_l.weight.copy_(torch.tensor([[3.0, 0.0], [0.0, 4.0]]))    # W_l p = (3, 4) -> p^ = (0.6, 0.8)
        fusion.W_g.weight.copy_(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))    # W_g x = (0, 2) -> x^ = (0, 1)
        fusion.U_l.weight.copy_(torch.tensor([[0.0, 0.0], [0.0, 0.0]]))
        fusion.U_g.weight.copy_(torch.tensor([[0.0, 0.0], [0.0, 1.0]]))    # gate input (0, 0) -> t = (0.5, 0.5)
    v = fusion(torch.tensor([[1.0, 1.0]], dtype=torch.float64), torch.tensor([[2.0, 0.0]], dtype=torch.float64))
    assert v[0].tolist() == pytest.approx([0.3, 0.9])


def test_sum_and_single_sides():
    torch.manual_seed(1)
    p, x = torch.rand(2, 6), torch.randn(2, 5)
    summed = GatedFusion(6, 5, 4, fusion="sum")
    expected = (torch.nn.functional.normalize(p @ summed.W_l.weight.T, dim=1)
                + torch.nn.functional.normalize(x @ summed.W_g.weight.T, dim=1))
    torch.testing.assert_close(summed(p, x), expected)
    only_context = GatedFusion(0, 5, 4)
    assert only_context.W_l is None and only_context.U_l is None
    torch.testing.assert_close(only_context(None, x), torch.nn.functional.normalize(x @ only_context.W_g.weight.T))


def model(**overrides) -> SCO:
    config = {**SCO.DEFAULTS, "context_dim": 5, "concept_dim": 6, "embed_size": 8, "word_dim": 4,
              "generation": False, **overrides}
    return SCO(vocab_size=12, **config)


def test_model_scores_are_cosines_of_fused_and_sentence_vectors():
    torch.manual_seed(2)
    sco = model().eval()
    context, concepts = torch.randn(3, 5), torch.rand(3, 6)
    tokens = torch.tensor([[1, 5, 6, 2, 0], [1, 7, 2, 0, 0], [1, 4, 8, 9, 2]])
    lengths = torch.tensor([4, 3, 5])
    sims, logp = sco(context, concepts, tokens, lengths)
    assert logp is None
    v = sco.fusion(concepts, context / context.norm(dim=1, keepdim=True))
    s = torch.stack([sco.sentence.lstm(sco.sentence.embed(tokens[i:i + 1, :n]))[1][0][-1, 0]
                     for i, n in enumerate(lengths.tolist())])
    expected = torch.nn.functional.cosine_similarity(v[:, None], s[None], dim=2)
    torch.testing.assert_close(sims, expected, atol=1e-6, rtol=1e-5)


def test_concepts_only_model_ignores_context():
    sco = model(use_context=False).eval()
    concepts = torch.rand(2, 6)
    a = sco.encode_images(torch.zeros(2, 0), concepts)
    assert a.shape == (2, 8)
    torch.testing.assert_close(a.norm(dim=1), torch.ones(2))

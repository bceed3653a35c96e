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


# ---- "ctx + sen": a generated sentence per image beside the context --------------------------------------------------

SENTENCES = torch.tensor([[1, 4, 5, 2, 0], [1, 9, 2, 0, 0]])
SENTENCE_LENGTHS = torch.tensor([4, 3])


def test_sentence_model_sums_the_generated_sentence_and_the_context():
    torch.manual_seed(3)
    sco = model(use_concepts=False, use_sentence=True, fusion="sum").eval()
    context = torch.randn(2, 5)
    v = sco.encode_images(context, torch.zeros(2, 0), SENTENCES, SENTENCE_LENGTHS)
    assert v.shape == (2, 8)
    s_g = torch.stack([sco.generated.lstm(sco.generated.embed(SENTENCES[i:i + 1, :n]))[1][0][-1, 0]
                       for i, n in enumerate(SENTENCE_LENGTHS.tolist())])
    x = context / context.norm(dim=1, keepdim=True)
    fused = (torch.nn.functional.normalize(s_g @ sco.fusion.W_l.weight.T, dim=1)
             + torch.nn.functional.normalize(x @ sco.fusion.W_g.weight.T, dim=1))
    torch.testing.assert_close(v, torch.nn.functional.normalize(fused, dim=1), atol=1e-6, rtol=1e-5)


def test_generated_sentence_encoder_is_not_the_query_sentence_encoder():
    """Table 1's "non-shared": the generated sentences have a word embedding (and LSTM) of their own."""
    sco = model(use_concepts=False, use_sentence=True)
    assert sco.generated.embed.weight.data_ptr() != sco.sentence.embed.weight.data_ptr()
    assert sco.generated.lstm is not sco.sentence.lstm


def test_the_image_depends_on_its_generated_sentence():
    torch.manual_seed(4)
    sco = model(use_concepts=False, use_sentence=True, fusion="sum").eval()
    context = torch.randn(1, 5).repeat(2, 1)
    v = sco.encode_images(context, torch.zeros(2, 0), SENTENCES, SENTENCE_LENGTHS)
    assert not torch.allclose(v[0], v[1])


def test_matching_loss_gradients_reach_the_generated_sentence_encoder():
    torch.manual_seed(5)
    sco = model(use_concepts=False, use_sentence=True, fusion="gate")
    tokens, lengths = torch.tensor([[1, 5, 6, 2], [1, 7, 2, 0]]), torch.tensor([4, 3])
    sims, _ = sco(torch.randn(2, 5), torch.zeros(2, 0), tokens, lengths, SENTENCES, SENTENCE_LENGTHS)
    (sims[0, 1] - sims[0, 0]).backward()
    for parameter in (sco.generated.embed.weight, sco.generated.lstm.weight_ih_l0, sco.fusion.U_l.weight):
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0


def test_sentence_model_without_its_sentences_is_refused():
    sco = model(use_concepts=False, use_sentence=True)
    with pytest.raises(ValueError, match="generated sentences"):
        sco.encode_images(torch.randn(2, 5), torch.zeros(2, 0))


def test_the_sentence_alone_is_the_image_representation_without_the_context():
    """The paper's "ctx + sen": v = l2norm(W_s s_g), whatever the context; no map of the context is built."""
    torch.manual_seed(6)
    sco = model(use_concepts=False, use_context=False, use_sentence=True).eval()
    assert sco.fusion.W_g is None and sco.fusion.U_l is None
    context = torch.randn(2, 5)
    v = sco.encode_images(context, torch.zeros(2, 0), SENTENCES, SENTENCE_LENGTHS)
    s_g = torch.stack([sco.generated.lstm(sco.generated.embed(SENTENCES[i:i + 1, :n]))[1][0][-1, 0]
                       for i, n in enumerate(SENTENCE_LENGTHS.tolist())])
    torch.testing.assert_close(v, torch.nn.functional.normalize(s_g @ sco.fusion.W_l.weight.T, dim=1), atol=1e-6,
                               rtol=1e-5)
    torch.testing.assert_close(sco.encode_images(torch.randn(2, 5), torch.zeros(2, 0), SENTENCES, SENTENCE_LENGTHS),
                               v)


def test_sentence_model_takes_no_concepts():
    with pytest.raises(ValueError, match="use_sentence takes the concepts' place: set use_concepts false"):
        model(use_sentence=True, use_concepts=True)


def test_a_checkpoint_config_without_use_sentence_builds_the_same_model():
    """Checkpoints of the other rows, saved before use_sentence existed, load unchanged: no sentence encoder."""
    from vltools.models import build_model, checkpoint_config, model_from_checkpoint

    old = {key: value for key, value in {**SCO.DEFAULTS, "context_dim": 5, "concept_dim": 6, "embed_size": 8,
                                         "word_dim": 4, "generation": False}.items() if key != "use_sentence"}
    built = build_model("sco", old, 12)
    payload = {"model": "sco", "config": old, "vocab": [f"w{i}" for i in range(12)], "state_dict": built.state_dict()}
    assert "use_sentence" not in checkpoint_config(payload)
    loaded = model_from_checkpoint(payload)
    assert loaded.generated is None
    assert not any(key.startswith("generated.") for key in loaded.state_dict())

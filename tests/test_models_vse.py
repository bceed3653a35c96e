"""VSE++ embeddings against direct formulas."""

from __future__ import annotations

import pytest
import torch

from vltools.models import MODELS, build_model

SIZES = {"img_dim": 12, "embed_size": 16, "word_dim": 8}


def l2(x: torch.Tensor) -> torch.Tensor:
    return x / (x.pow(2).sum(-1, keepdim=True).sqrt() + 1e-8)


def inputs():
    gen = torch.Generator().manual_seed(1)
    regions = torch.randn(3, 5, 12, generator=gen)
    lengths = torch.tensor([4, 7, 2])
    tokens = torch.randint(4, 30, (3, 7), generator=gen) * (torch.arange(7) < lengths[:, None])
    return regions, tokens, lengths


@pytest.mark.parametrize("bi_gru", [False, True])
def test_vse_embeddings_match_direct(bi_gru):
    torch.manual_seed(0)
    model = build_model("vse", {**SIZES, "bi_gru": bi_gru}, 30).eval()
    assert MODELS["vse"].separable and not MODELS["sgr"].separable
    regions, tokens, lengths = inputs()
    num_regions = torch.tensor([5, 2, 3])
    with torch.no_grad():
        img = model.encode_images(regions, num_regions)
        cap = model.encode_captions(tokens, lengths)
        fc = model.img_enc.fc
        for i, n in enumerate(num_regions.tolist()):
            torch.testing.assert_close(img[i], l2(regions[i, :n].mean(0) @ fc.weight.t() + fc.bias))
        for c, n in enumerate(lengths.tolist()):
            out, _ = model.txt_enc.cap_rnn(model.txt_enc.embed(tokens[c:c + 1, :n]))
            half = out.size(2) // 2
            final = (out[0, n - 1, :half] + out[0, 0, half:]) / 2 if bi_gru else out[0, n - 1]
            torch.testing.assert_close(cap[c], l2(final), atol=1e-6, rtol=0)
        sims = model.similarity(img, cap, lengths)
    cosine = torch.nn.functional.cosine_similarity(img[:, None], cap[None], dim=-1)
    torch.testing.assert_close(sims, cosine, atol=1e-6, rtol=0)
    torch.testing.assert_close(model(regions, num_regions, tokens, lengths).detach(), sims)


def test_vse_trains():
    torch.manual_seed(0)
    model = build_model("vse", SIZES, 30).train()
    regions, tokens, lengths = inputs()
    model(regions, None, tokens, lengths).diagonal().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())

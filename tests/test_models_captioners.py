"""NeuralTalk2 and AdaptiveAttention: scoring captions under chosen image rows, masks, decoding hooks."""

from __future__ import annotations

import torch

from vltools.decoding import greedy
from vltools.models import build_model


def small(name: str):
    torch.manual_seed(0)
    sizes = {"img_dim": 6, "embed_size": 5, "hidden_size": 7, "dropout": 0.0}
    if name == "adaptive-attention":
        sizes["attention_size"] = 4
    return build_model(name, sizes, 10).eval()


def images(gen: torch.Generator) -> dict[str, torch.Tensor]:
    return {"global": torch.randn(3, 6, generator=gen), "regions": torch.randn(3, 4, 6, generator=gen),
            "num_regions": torch.tensor([4, 2, 3])}


def test_image_rows_score_each_caption_under_the_chosen_image():
    gen = torch.Generator().manual_seed(1)
    feats = images(gen)
    tokens = torch.randint(3, 10, (5, 4), generator=gen)
    rows = torch.tensor([2, 0, 0, 1, 2])
    for name in ("neuraltalk2", "adaptive-attention"):
        model = small(name)
        picked = {k: v[rows] for k, v in feats.items()}
        torch.testing.assert_close(model(feats, tokens, rows), model(picked, tokens))


def test_adaptive_attention_ignores_padding_regions():
    gen = torch.Generator().manual_seed(2)
    feats = images(gen)
    tokens = torch.randint(3, 10, (3, 5), generator=gen)
    model = small("adaptive-attention")
    changed = dict(feats, regions=feats["regions"].clone())
    changed["regions"][1, 2:] = 50.0
    torch.testing.assert_close(model(changed, tokens), model(feats, tokens))
    changed["regions"][1, 0] += 1.0
    assert not torch.allclose(model(changed, tokens)[1], model(feats, tokens)[1])


def test_neuraltalk2_uses_the_global_vector_and_decodes():
    gen = torch.Generator().manual_seed(3)
    feats = images(gen)
    model = small("neuraltalk2")
    out = greedy(model.step, *model.init_state(feats), max_len=5)
    assert out.tokens.shape[0] == 3 and out.tokens.size(1) <= 6
    other = dict(feats, **{"global": feats["global"] + 1.0})
    assert not torch.allclose(model.init_state(other)[0]["h"], model.init_state(feats)[0]["h"])

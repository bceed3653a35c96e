"""NeuralTalk2 and AdaptiveAttention: scoring captions under chosen image rows, masks, decoding hooks."""

from __future__ import annotations

import pytest
import torch

from vltools.decoding import greedy
from vltools.errors import VLToolsError
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


def test_fitted_standardisation_gives_each_dimension_zero_mean_and_unit_spread():
    gen = torch.Generator().manual_seed(4)
    rows = 5.0 + torch.randn(200, 6, generator=gen) * torch.tensor([0.1, 1.0, 2.0, 0.5, 0.3, 0.0])
    model = small("neuraltalk2")
    model.fit_features([{"global": rows[:120]}, {"global": rows[120:]}])   # blocks, as the task reads them
    out = model.norm(rows)
    torch.testing.assert_close(out[:, :5].mean(0), torch.zeros(5), atol=1e-5, rtol=0)
    torch.testing.assert_close(out[:, :5].std(0, unbiased=False), torch.ones(5), atol=1e-4, rtol=0)
    spread = rows[:, :5].std(0, unbiased=False)
    assert float(model.norm.scale[5]) == pytest.approx(0.01 * float(spread.sum() / 6), rel=1e-4)  # the floor


def test_adaptive_attention_fits_on_real_regions_only():
    gen = torch.Generator().manual_seed(5)
    feats = images(gen)
    feats["regions"][1, 2:] = 1000.0          # padding of image 1 (2 real regions)
    model = small("adaptive-attention")
    model.fit_features([feats])
    real = torch.cat([feats["regions"][0], feats["regions"][1, :2], feats["regions"][2, :3]])
    torch.testing.assert_close(model.norm.mean, real.mean(0))


@torch.no_grad()
def test_images_that_differ_by_a_small_share_of_their_offset_become_far_apart():
    gen = torch.Generator().manual_seed(6)
    rows = 3.0 + 0.05 * torch.randn(50, 6, generator=gen)     # cosine near 1 between any two images
    model = small("neuraltalk2")
    before = model.conditioning({"global": rows}).first_input
    model.fit_features([{"global": rows}])
    after = model.conditioning({"global": rows}).first_input
    assert float(after.std(0).mean()) > 10 * float(before.std(0).mean())


def test_feature_norm_none_feeds_the_features_as_they_are_and_a_bad_value_is_refused():
    model = build_model("neuraltalk2", {"img_dim": 6, "embed_size": 5, "hidden_size": 7, "feature_norm": "none"}, 10)
    assert not any("norm" in key for key in model.state_dict())
    model.fit_features([{"global": torch.randn(4, 6)}])              # nothing to fit
    with pytest.raises(VLToolsError, match="model.feature_norm must be one of standard, none, not 'batch'"):
        build_model("neuraltalk2", {"img_dim": 6, "feature_norm": "batch"}, 10)

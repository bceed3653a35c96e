"""R-MAC model: pooling against a direct loop over regions, PCA-whitening at initialisation, the text branch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vltools.models import build_model
from vltools.models.rmac import joint, pca_whitening
from vltools.vision.backbones import normalize
from vltools.vision.pooling import rmac_regions


def tiny(**config):
    torch.manual_seed(0)
    return build_model("rmac", {"backbone": "resnet18", "scales": "1.0", **config}, 7).eval()


def test_embedding_equals_a_direct_loop_over_regions_and_scales():
    model = tiny(scales="1.0,0.5", text=True)
    with torch.no_grad():
        model.whiten.weight.copy_(torch.randn(512, 512) / 20)
        model.whiten.bias.copy_(torch.randn(512) / 20)
    images = torch.randint(0, 256, (2, 3, 64, 96), dtype=torch.uint8)
    with torch.no_grad():
        got = model.encode_images(images)
        for b in range(2):
            total = torch.zeros(512, dtype=torch.float64)
            for scale in (1.0, 0.5):
                x = normalize(images[b:b + 1])
                if scale != 1.0:
                    x = torch.nn.functional.interpolate(x, size=(32, 48), mode="bilinear", antialias=True)
                fmap = model.backbone(x)[0].double()
                for y, x0, s in rmac_regions(fmap.shape[1], fmap.shape[2]):
                    v = fmap[:, y:y + s, x0:x0 + s].amax(dim=(1, 2))
                    v = v / v.norm()
                    w = model.whiten.weight.double() @ v + model.whiten.bias.double()
                    total += w / w.norm()
            np.testing.assert_allclose(got[b].detach().double().numpy(), (total / total.norm()).numpy(), atol=1e-5)


def test_images_of_different_sizes_in_one_padded_batch_equal_one_at_a_time():
    model = tiny()
    small = torch.randint(0, 256, (3, 64, 96), dtype=torch.uint8)
    large = torch.randint(0, 256, (3, 96, 80), dtype=torch.uint8)
    padded = torch.zeros(2, 3, 96, 96, dtype=torch.uint8)
    padded[0, :, :64, :96], padded[1, :, :96, :80] = small, large
    got = model.encode_images(padded, torch.tensor([[64, 96], [96, 80]]))
    torch.testing.assert_close(got[0], model.encode_images(small[None])[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1], model.encode_images(large[None])[0], atol=1e-5, rtol=1e-5)


def test_whitening_initialisation_equals_pca_whitening():
    rng = np.random.default_rng(0)
    data = rng.standard_normal((400, 6)) @ rng.standard_normal((6, 6)) + rng.standard_normal(6)
    weight, bias = pca_whitening(torch.from_numpy(data), eps=0.0)
    layer = torch.nn.Linear(6, 6).double()
    with torch.no_grad():
        layer.weight.copy_(weight.double())
        layer.bias.copy_(bias.double())
        got = layer(torch.from_numpy(data)).numpy()
    # PCA-whitening by SVD of the centred data: projections on the principal axes, each scaled to unit variance
    centred = data - data.mean(axis=0)
    _, singular, axes = np.linalg.svd(centred, full_matrices=False)
    expected = centred @ axes.T / (singular / np.sqrt(len(data)))
    signs = np.sign((got * expected).sum(axis=0))           # an eigenvector's sign is arbitrary
    np.testing.assert_allclose(got * signs, expected, atol=1e-4)
    np.testing.assert_allclose(np.cov(got.T, bias=True), np.eye(6), atol=1e-4)


def test_text_branch_and_joint_queries():
    model = tiny(text=True)
    tfidf = torch.zeros(2, 7)
    tfidf[0, 3], tfidf[1, [1, 2]] = 1.0, 0.5 ** 0.5
    theta = model.encode_texts(tfidf)
    direct = tfidf @ model.text.weight.T
    torch.testing.assert_close(theta, direct / direct.norm(dim=1, keepdim=True))
    phi = torch.nn.functional.normalize(torch.randn(2, 512), dim=1)
    torch.testing.assert_close(joint(phi, theta), (phi + theta) / (phi + theta).norm(dim=1, keepdim=True))
    with pytest.raises(ValueError, match="no text branch"):
        tiny().encode_texts(tfidf)


def test_batchnorm_stays_frozen_in_training_mode():
    model = tiny().train()
    assert model.training and all(not m.training for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d))

"""The concept CNN: Eq. 1 as read (logistic loss with +-1 labels), the element-wise max over regions."""

from __future__ import annotations

import math

import torch
from torch import nn

from vltools.models.concepts import ConceptCNN, concept_loss, max_over_regions


def test_max_over_regions_by_hand():
    scores = torch.tensor([[[0.1, 0.9, 0.3], [0.7, 0.2, 0.3], [0.4, 0.5, 0.8]],
                           [[0.0, 0.0, 0.0], [0.2, 0.1, 0.6], [0.0, 0.3, 0.0]]])
    torch.testing.assert_close(max_over_regions(scores), torch.tensor([[0.7, 0.9, 0.8], [0.2, 0.3, 0.6]]))


def test_concept_loss_is_logistic_loss_with_signed_labels():
    logits = torch.tensor([[2.0, -1.0, 0.5], [0.0, 3.0, -2.0]])
    targets = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    expected = sum(math.log(1 + math.exp(-(2 * y - 1) * z))
                   for row_z, row_y in zip(logits.tolist(), targets.tolist(), strict=True)
                   for z, y in zip(row_z, row_y, strict=True)) / 2
    assert abs(concept_loss(logits, targets).item() - expected) < 1e-6


def test_region_scores_batched_equal_one_region_at_a_time():
    torch.manual_seed(0)
    trunk = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 5, 3, stride=2))
    model = ConceptCNN(trunk, 5, 6).eval()
    crops = torch.randn(3, 7, 3, 16, 16)
    with torch.no_grad():
        batched = model.region_scores(crops, chunk=4)
        single = torch.stack([torch.stack([torch.sigmoid(model(crops[b, r:r + 1]))[0] for r in range(7)]).max(0).values
                              for b in range(3)])
    torch.testing.assert_close(batched, single, atol=1e-6, rtol=1e-5)

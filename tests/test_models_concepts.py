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


def test_box_logits_are_the_classifier_of_each_box_pooled_from_its_own_image():
    torch.manual_seed(0)
    # a trunk whose feature map is the same in every cell (of an image's mean colour): every box of an image then
    # pools that one vector, so its logits are the whole image's
    trunk = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(3, 5, 1), nn.Upsample(size=8))
    model = ConceptCNN(trunk, 5, 6, stride=4).eval()
    images = torch.randn(2, 3, 32, 32)
    boxes = [torch.tensor([[0.0, 0.0, 8.0, 8.0], [12.0, 4.0, 32.0, 20.0]]), torch.tensor([[4.0, 4.0, 28.0, 28.0]])]
    with torch.no_grad():
        logits = model(images, boxes)
        whole = model(images)
    assert logits.shape == (3, 6)
    torch.testing.assert_close(logits, whole[[0, 0, 1]])
    assert not torch.allclose(whole[0], whole[1])
    spatial = ConceptCNN(nn.Conv2d(3, 5, 3, stride=4, padding=1), 5, 6, stride=4).eval()
    with torch.no_grad():
        logits = spatial(images, boxes)
        alone = spatial(images[1:], boxes[1:])
    assert not torch.allclose(logits[0], logits[1])      # where the box is matters
    torch.testing.assert_close(logits[2:], alone)         # and only its own image

"""L2C's encoder pieces against direct computations: Eq. 1 nodes, Eq. 2 TV, the GCN step, node differences."""

from __future__ import annotations

import pytest
import torch

from vltools.models.l2c import (
    GraphReasoning,
    L2CEncoder,
    SemanticPooling,
    difference_nodes,
    masked_average_nodes,
    semantic_nodes,
    total_variation,
)


def _maps(seed: int = 0, b: int = 2, d: int = 5, h: int = 4, w: int = 3, k: int = 3):
    g = torch.Generator().manual_seed(seed)
    featmap = torch.randn(b, d, h, w, generator=g, dtype=torch.float64)
    mask = torch.rand(b, h, w, generator=g, dtype=torch.float64)
    confidence = torch.rand(b, k, h, w, generator=g, dtype=torch.float64).softmax(dim=1)
    return featmap, mask, confidence


def test_semantic_nodes_are_the_sum_over_pixels_of_f_b_c():
    featmap, mask, confidence = _maps()
    nodes = semantic_nodes(featmap, mask, confidence)
    b, d, h, w = featmap.shape
    k = confidence.shape[1]
    assert nodes.shape == (b, k, d)
    for n in range(b):
        for node in range(k):
            for c in range(d):
                direct = sum(float(featmap[n, c, i, j] * mask[n, i, j] * confidence[n, node, i, j])
                             for i in range(h) for j in range(w))
                assert abs(float(nodes[n, node, c]) - direct) < 1e-10


def test_masked_average_is_the_mask_weighted_mean_and_an_empty_mask_gives_zeros():
    featmap, mask, _ = _maps(1)
    mask[1] = 0
    nodes = masked_average_nodes(featmap, mask)
    assert nodes.shape == (2, 1, featmap.shape[1])
    weights = mask[0].flatten()
    direct = (featmap[0].flatten(1) * weights).sum(dim=1) / weights.sum()
    torch.testing.assert_close(nodes[0, 0], direct)
    assert torch.equal(nodes[1], torch.zeros_like(nodes[1]))


def test_total_variation_matches_a_direct_loop():
    _, _, confidence = _maps(2, h=5, w=4)
    b, k, h, w = confidence.shape
    tv = total_variation(confidence)
    for n in range(b):
        direct = 0.0
        for c in range(k):
            for i in range(h):
                for j in range(w):
                    if i + 1 < h:
                        direct += abs(float(confidence[n, c, i + 1, j] - confidence[n, c, i, j]))
                    if j + 1 < w:
                        direct += abs(float(confidence[n, c, i, j + 1] - confidence[n, c, i, j]))
        assert abs(float(tv[n]) - direct) < 1e-10


def test_total_variation_is_zero_on_constant_maps():
    assert float(total_variation(torch.full((1, 9, 6, 6), 1 / 9)).sum()) == 0.0


def test_pooling_gives_a_distribution_over_k_at_each_pixel():
    pool = SemanticPooling(in_dim=6, num_nodes=9, hidden=8).eval()
    confidence = pool(torch.randn(2, 6, 5, 5))
    assert confidence.shape == (2, 9, 5, 5)
    torch.testing.assert_close(confidence.sum(dim=1), torch.ones(2, 5, 5))


def test_gcn_step_matches_a_hand_computation():
    gcn = GraphReasoning(dim=2, steps=1)
    with torch.no_grad():
        gcn.query[0].weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
        gcn.key[0].weight.copy_(torch.tensor([[1.0, 1.0], [0.0, 0.0]]))
        gcn.update[0].weight.copy_(torch.tensor([[1.0, 0.0], [0.0, -1.0]]))
    nodes = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]])
    # W_i v: (1, 0), (0, 2); W_j v: (1, 0), (2, 0); A = [[1, 2], [0, 0]]
    # softmax rows: [e/(e+e^2), e^2/(e+e^2)] = [1/(1+e), e/(1+e)], [1/2, 1/2]
    e = torch.e
    a = torch.tensor([[1 / (1 + e), e / (1 + e)], [0.5, 0.5]])
    mixed = a @ nodes[0]                                  # rows: (1/(1+e), 2e/(1+e)), (1/2, 1)
    updated = torch.stack([mixed[:, 0], -mixed[:, 1]], dim=1).clamp(min=0)   # W_g then relu
    expected = nodes[0] + updated
    torch.testing.assert_close(gcn(nodes)[0], expected)
    torch.testing.assert_close(gcn.affinity(nodes)[0], a)


def test_swapping_the_images_of_a_pair_negates_the_difference_nodes():
    torch.manual_seed(0)
    encoder = L2CEncoder(feature_dim=6, num_nodes=4, pool_hidden=8, graph_dim=10, gcn_steps=2)
    featmap, mask = torch.randn(6, 6, 3, 3), torch.rand(6, 3, 3)
    for mode in (encoder.train, encoder.eval):
        mode()
        # a batch of three pairs, both images in one forward (the BatchNorm statistics are the batch's)
        nodes, _ = encoder(featmap, mask)
        swapped, _ = encoder(torch.cat([featmap[3:], featmap[:3]]), torch.cat([mask[3:], mask[:3]]))
        forward = difference_nodes(nodes[:3], nodes[3:])
        backward = difference_nodes(swapped[:3], swapped[3:])
        torch.testing.assert_close(backward, -forward)
        assert forward.abs().sum() > 0


def test_empty_masks_give_finite_nodes_and_gradients():
    torch.manual_seed(0)
    for pooling in ("semantic", "masked_average"):
        encoder = L2CEncoder(feature_dim=4, num_nodes=3, pool_hidden=5, graph_dim=6, pooling=pooling)
        featmap = torch.randn(2, 4, 3, 3, requires_grad=True)
        nodes, tv = encoder(featmap, torch.zeros(2, 3, 3))
        (nodes.sum() + tv.sum()).backward()
        assert torch.isfinite(nodes).all() and torch.isfinite(featmap.grad).all()


def test_encoder_node_counts_per_pooling():
    featmap, mask = torch.randn(2, 4, 3, 3), torch.rand(2, 3, 3)
    for pooling, count in (("semantic", 9), ("masked_average", 1), ("global", 1)):
        encoder = L2CEncoder(feature_dim=4, pool_hidden=5, graph_dim=6, pooling=pooling).eval()
        nodes, tv = encoder(featmap, mask)
        assert nodes.shape == (2, count, 6) and encoder.num_nodes == count
        assert (tv > 0).all() if pooling == "semantic" else (tv == 0).all()


def test_encoder_nodes_are_eq1_by_default_and_over_the_mask_area_as_an_option():
    torch.manual_seed(0)
    encoder = L2CEncoder(feature_dim=5, num_nodes=4, pool_hidden=6, graph_dim=7).eval()
    featmap, mask = torch.randn(2, 5, 3, 4), torch.rand(2, 3, 4)
    nodes, _ = encoder.pool_nodes(featmap, mask)
    confidence = encoder.pool(featmap)
    # Eq. 1 as printed: the plain sum over pixels; the K soft assignments sum to one at each pixel, so the nodes
    # add up to sum_ij F B
    torch.testing.assert_close(nodes, semantic_nodes(featmap, mask, confidence))
    torch.testing.assert_close(nodes.sum(dim=1), torch.einsum("bdhw,bhw->bd", featmap, mask))
    encoder.node_norm = "area"
    divided, _ = encoder.pool_nodes(featmap, mask)
    area = mask.sum(dim=(1, 2))
    torch.testing.assert_close(divided, nodes / area[:, None, None])
    torch.testing.assert_close(divided.sum(dim=1), masked_average_nodes(featmap, mask)[:, 0])


def test_l2c_model_takes_node_norm_and_rejects_unknown_values():
    from vltools.errors import VLToolsError
    from vltools.models.l2c import L2C

    assert L2C.DEFAULTS["node_norm"] == "sum"
    model = L2C(vocab_size=7, feature_dim=4, num_nodes=3, pool_hidden=4, graph_dim=6, embed_size=4,
                hidden_size=6, attention_size=4, node_norm="area")
    assert model.encoder.node_norm == "area"
    with pytest.raises(VLToolsError, match="node_norm must be one of sum, area"):
        L2C(vocab_size=7, feature_dim=4, node_norm="mean")

"""The bottom-up-attention detector (vltools.models.bottom_up) with a small random-weight model of the released
layout: the released geometry (Caffe anchors, "+1" box decoding, clipping, class-wise NMS, the 10-100 / 36 box
choice), image pre-processing, shapes, batches of images of different sizes and determinism."""

from __future__ import annotations

import math

import pytest
import torch

from vltools.models.bottom_up import (
    BottomUpAttention,
    caffe_anchors,
    classwise_max_confidence,
    clip_boxes,
    decode_boxes,
    label_names,
    legacy_nms,
    select_indices,
    select_regions,
)
from vltools.vision.bottom_up import caffe_resize_scale, prepare_images, resize_like_cv2

# the released layout at a small size: 8 classes + background, 4 attributes + "no attribute", 6 anchors
TINY = {"stem_channels": 4, "res2_channels": 8, "bottleneck_channels": 2, "blocks": [1, 1, 1], "res5_blocks": 1,
        "pool_size": 7, "rpn_channels": 8, "anchor_scales": [1, 2], "rpn_pre_nms": 300, "rpn_post_nms": 120,
        "rpn_min_size": 4, "num_classes": 9, "num_attributes": 5, "class_embedding": 4, "attribute_hidden": 8,
        "test_scale": 128, "test_max_size": 200}
SIZES = [(60, 80), (90, 50), (64, 64), (40, 100)]  # original (h, w), all different


def tiny_model(seed: int = 0) -> BottomUpAttention:
    """The small model with every weight random, frozen batch-norm statistics included; small RPN deltas and class
    weights (as the released initialisation has) so that proposals spread over the image and the class-wise
    confidences straddle 0.2."""
    torch.manual_seed(seed)
    model = BottomUpAttention(**TINY).eval()
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("norm.weight") or name.endswith("norm.running_var"):
                buffer.uniform_(0.5, 1.5)
            elif name.endswith("norm.bias") or name.endswith("norm.running_mean"):
                buffer.normal_(0.0, 0.1)
        model.rpn.deltas.weight.mul_(0.1)
        model.predictor.cls_score.weight.normal_(0.0, 0.03)
    return model


def random_images() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, 256, (3, h, w), generator=generator, dtype=torch.uint8) for h, w in SIZES]


@pytest.fixture(scope="module")
def model() -> BottomUpAttention:
    return tiny_model()


@pytest.fixture(scope="module")
def images() -> list[torch.Tensor]:
    return random_images()


@pytest.fixture(scope="module")
def batched(model, images):
    return model.detect(images)


@pytest.fixture(scope="module")
def singles(model, images):
    return [model.detect([image])[0] for image in images]


# --- geometry ---------------------------------------------------------------------------------------------------

def test_caffe_anchors_are_those_of_generate_anchors():
    # py-faster-rcnn's generate_anchors() output for scales (8, 16, 32), as printed by its __main__
    known = torch.tensor([[-84, -40, 99, 55], [-176, -88, 191, 103], [-360, -184, 375, 199],
                          [-56, -56, 71, 71], [-120, -120, 135, 135], [-248, -248, 263, 263],
                          [-36, -80, 51, 95], [-80, -168, 95, 183], [-168, -344, 183, 359]], dtype=torch.float32)
    assert torch.equal(caffe_anchors(16, [0.5, 1.0, 2.0], [8, 16, 32]), known)
    released = caffe_anchors(16, [0.5, 1.0, 2.0], [4, 8, 16, 32])
    assert released.shape == (12, 4)
    square = released[4:8]  # ratio 1: 64, 128, 256, 512 pixels, centred on 7.5
    assert torch.equal(square[:, 2] - square[:, 0] + 1, torch.tensor([64.0, 128.0, 256.0, 512.0]))
    assert torch.equal((square[:, 0] + square[:, 2]) / 2, torch.full((4,), 7.5))


def test_decode_boxes_matches_the_caffe_formula_written_out():
    generator = torch.Generator().manual_seed(2)
    corners = torch.rand(7, 2, generator=generator) * 200
    boxes = torch.cat([corners, corners + torch.rand(7, 2, generator=generator) * 100], dim=1)
    deltas = torch.randn(7, 12, generator=generator) * 0.5
    deltas[3, 2] = 9.0  # dw beyond the cap log(1000 / 16)
    decoded = decode_boxes(boxes, deltas)
    cap = math.log(1000.0 / 16)
    for i in range(7):
        x1, y1, x2, y2 = boxes[i].tolist()
        width, height = x2 - x1 + 1.0, y2 - y1 + 1.0
        cx, cy = x1 + 0.5 * width, y1 + 0.5 * height
        for k in range(3):
            dx, dy, dw, dh = deltas[i, 4 * k:4 * k + 4].tolist()
            new_cx, new_cy = dx * width + cx, dy * height + cy
            new_w, new_h = math.exp(min(dw, cap)) * width, math.exp(min(dh, cap)) * height
            expected = [new_cx - new_w / 2, new_cy - new_h / 2, new_cx + new_w / 2, new_cy + new_h / 2]
            assert decoded[i, 4 * k:4 * k + 4].tolist() == pytest.approx(expected, rel=1e-5, abs=1e-3)


def test_clip_boxes_keeps_boxes_within_the_last_pixel():
    boxes = torch.tensor([[-5.0, -1.0, 250.0, 90.0, 10.0, 20.0, 30.0, 40.0]])
    clipped = clip_boxes(boxes, (80, 200))
    assert clipped.tolist() == [[0.0, 0.0, 199.0, 79.0, 10.0, 20.0, 30.0, 40.0]]


def brute_force_nms(boxes: list[list[float]], scores: list[float], threshold: float) -> list[int]:
    """Greedy NMS as in py-faster-rcnn's cpu_nms: "+1" areas, suppress overlaps >= threshold."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    kept, suppressed = [], set()
    for position, i in enumerate(order):
        if i in suppressed:
            continue
        kept.append(i)
        ax1, ay1, ax2, ay2 = boxes[i]
        for j in order[position + 1:]:
            bx1, by1, bx2, by2 = boxes[j]
            w = max(0.0, min(ax2, bx2) - max(ax1, bx1) + 1)
            h = max(0.0, min(ay2, by2) - max(ay1, by1) + 1)
            inter = w * h
            union = (ax2 - ax1 + 1) * (ay2 - ay1 + 1) + (bx2 - bx1 + 1) * (by2 - by1 + 1) - inter
            if inter / union >= threshold:
                suppressed.add(j)
    return kept


def random_detections(count: int, classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    corners = torch.rand(count, 2, generator=generator) * 60
    boxes = torch.cat([corners, corners + 5 + torch.rand(count, 2, generator=generator) * 40], dim=1)
    boxes[count // 2:] = boxes[:count - count // 2] + torch.rand(count - count // 2, 4, generator=generator) * 4
    scores = (torch.randn(count, classes, generator=generator) * 2).softmax(dim=1)
    return boxes, scores


def test_legacy_nms_matches_brute_force():
    boxes, scores = random_detections(40, 2, seed=3)
    kept = legacy_nms(boxes, scores[:, 1], 0.7).tolist()
    assert kept == brute_force_nms(boxes.tolist(), scores[:, 1].tolist(), 0.7)
    assert len(kept) < 40  # something was suppressed


@pytest.mark.parametrize("method", ["loop", "vectorized"])
def test_classwise_max_confidence_matches_brute_force(method):
    boxes, scores = random_detections(30, 7, seed=4)
    expected = [0.0] * 30
    for column in range(1, 7):
        for i in brute_force_nms(boxes.tolist(), scores[:, column].tolist(), 0.3):
            expected[i] = max(expected[i], float(scores[i, column]))
    got = classwise_max_confidence(boxes, scores, 0.3, method=method)
    assert got.tolist() == pytest.approx(expected, abs=0)
    best_foreground = scores[:, 1:].max(dim=1).values
    assert (got < best_foreground).any()  # NMS removed some boxes' best class
    assert (got <= best_foreground).all()


def test_select_indices_follows_the_released_rule():
    confidence = torch.tensor([0.1, 0.5, 0.05, 0.3, 0.25, 0.9, 0.15])
    assert select_indices(confidence, 2, 4, 0.2).tolist() == [1, 3, 4, 5]  # 4 pass: original order
    assert select_indices(confidence, 2, 3, 0.2).tolist() == [5, 1, 3]  # too many: the best first
    assert select_indices(confidence, 2, 4, 0.95).tolist() == [5, 1]  # none pass: the best min_regions
    assert select_indices(confidence, 6, 10, 0.2).tolist() == [5, 1, 3, 4, 6, 0]  # too few


# --- pre-processing -----------------------------------------------------------------------------------------------

def test_resize_scale_is_the_released_one():
    assert caffe_resize_scale(480, 640) == pytest.approx(600 / 480)
    assert caffe_resize_scale(300, 1000) == pytest.approx(1.0)  # 600 / 300 would make 2000 > 1000
    assert caffe_resize_scale(500, 834) == pytest.approx(1000 / 834)  # round(1.2 * 834) = 1001 > 1000
    assert caffe_resize_scale(500, 833) == pytest.approx(1.2)  # round(999.6) = 1000 is allowed


def test_resize_like_cv2_matches_opencv_sampling_written_out():
    generator = torch.Generator().manual_seed(5)
    image = torch.rand(2, 5, 7, generator=generator) * 255
    factor = 1.7
    resized = resize_like_cv2(image, factor)
    assert resized.shape == (2, round(5 * factor), round(7 * factor))

    def taps(index: int, size: int) -> tuple[int, int, float]:  # cv2 resize.cpp, INTER_LINEAR
        position = (index + 0.5) / factor - 0.5
        start = math.floor(position)
        fraction = position - start
        if start < 0:
            start, fraction = 0, 0.0
        if start >= size - 1:
            start, fraction = size - 1, 0.0
        return start, min(start + 1, size - 1), fraction

    for y in range(resized.shape[1]):
        y0, y1, fy = taps(y, 5)
        for x in range(resized.shape[2]):
            x0, x1, fx = taps(x, 7)
            top = image[:, y0, x0] * (1 - fx) + image[:, y0, x1] * fx
            bottom = image[:, y1, x0] * (1 - fx) + image[:, y1, x1] * fx
            assert torch.allclose(resized[:, y, x], top * (1 - fy) + bottom * fy, atol=1e-3)


def test_prepare_images_subtracts_bgr_means_and_pads_at_the_bottom_right():
    red = torch.zeros(3, 10, 20, dtype=torch.uint8)
    red[0] = 200  # RGB
    other = torch.full((3, 20, 10), 100, dtype=torch.uint8)
    batch, sizes, scales = prepare_images([red, other], "rgb", scale=20, max_size=40)
    assert sizes == [(20, 40), (40, 20)] and scales == [2.0, 2.0]
    assert batch.shape == (2, 3, 40, 40) and batch.dtype == torch.float32
    assert torch.allclose(batch[0, :, :20, :40].mean(dim=(1, 2)), torch.tensor([-102.9801, -115.9465, 77.2283]))
    assert torch.count_nonzero(batch[0, :, 20:, :]) == 0 and torch.count_nonzero(batch[1, :, :, 20:]) == 0


# --- the model ----------------------------------------------------------------------------------------------------

def test_default_model_is_the_released_architecture():
    with torch.device("meta"):
        released = BottomUpAttention()
    shapes = {key: tuple(value.shape) for key, value in released.state_dict().items()}
    assert shapes["backbone.stem.conv1.weight"] == (64, 3, 7, 7)
    assert shapes["backbone.res2.0.shortcut.weight"] == (256, 64, 1, 1)
    assert shapes["backbone.res3.0.conv1.weight"] == (128, 256, 1, 1)
    assert shapes["backbone.res4.22.conv3.weight"] == (1024, 256, 1, 1)
    assert "backbone.res4.23.conv1.weight" not in shapes  # 3, 4, 23 blocks: ResNet-101
    assert shapes["rpn.conv.weight"] == (512, 1024, 3, 3)
    assert shapes["rpn.objectness.weight"] == (24, 512, 1, 1) and shapes["rpn.deltas.weight"] == (48, 512, 1, 1)
    assert shapes["res5.0.shortcut.weight"] == (2048, 1024, 1, 1) and shapes["res5.2.conv2.weight"] == (512, 512, 3, 3)
    assert shapes["predictor.cls_score.weight"] == (1601, 2048)
    assert shapes["predictor.bbox_pred.weight"] == (6404, 2048)
    assert shapes["predictor.cls_embed.weight"] == (1601, 256)
    assert shapes["predictor.attr_fc.weight"] == (512, 2304)
    assert shapes["predictor.attr_score.weight"] == (401, 512)
    assert released.res5[0].conv1.stride == (1, 1) and released.res5[0].conv2.dilation == (2, 2)
    assert released.backbone.res3[0].conv1.stride == (2, 2) and released.backbone.res3[0].conv2.stride == (1, 1)


def test_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="no setting colour"):
        BottomUpAttention(colour=3)


def test_detections_have_the_documented_shapes(batched):
    for detections, (h, w) in zip(batched, SIZES, strict=True):
        count = len(detections.proposals)
        assert 36 <= count <= TINY["rpn_post_nms"]
        assert detections.proposals.dtype == torch.float32
        assert detections.class_probs.shape == (count, 9)
        assert detections.box_deltas.shape == (count, 36)
        assert detections.attribute_probs.shape == (count, 5)
        assert detections.features.shape == (count, 64)
        assert torch.allclose(detections.class_probs.sum(dim=1), torch.ones(count))
        assert detections.image_size == (h, w)
        scaled = detections.proposals * detections.scale  # clipped to the resized image
        resized_h, resized_w = round(h * detections.scale), round(w * detections.scale)
        assert scaled.min() >= 0 and (scaled[:, 2] <= resized_w - 1 + 1e-3).all()
        assert (scaled[:, 3] <= resized_h - 1 + 1e-3).all()
        assert (detections.proposals[:, 2] >= detections.proposals[:, 0]).all()


def test_regions_shapes_dtypes_and_ranges(model, images):
    for regions in model(images[:2], num_regions=36):
        assert regions.boxes.shape == (36, 4) and regions.boxes.dtype == torch.float32
        assert regions.features.shape == (36, 64) and regions.features.dtype == torch.float32
        for name in ("labels", "attributes"):
            assert getattr(regions, name).shape == (36,) and getattr(regions, name).dtype == torch.int64
        for name in ("label_scores", "attribute_scores", "scores"):
            assert getattr(regions, name).shape == (36,) and getattr(regions, name).dtype == torch.float32
        assert 0 <= int(regions.labels.min()) and int(regions.labels.max()) < 8
        assert 0 <= int(regions.attributes.min()) and int(regions.attributes.max()) < 4


def test_fixed_and_adaptive_box_counts(batched):
    for detections in batched:
        confidence = classwise_max_confidence(detections.proposals, detections.class_probs, 0.3)
        passing = int((confidence >= 0.2).sum())
        assert len(select_regions(detections, num_regions=36).boxes) == 36
        adaptive = select_regions(detections, min_regions=10, max_regions=100, score_threshold=0.2)
        assert len(adaptive.boxes) == min(max(passing, 10), 100)
        if passing >= 10:
            assert (adaptive.scores >= 0.2).all()
        capped = select_regions(detections, min_regions=10, max_regions=20, score_threshold=0.0)
        assert len(capped.boxes) == 20
        assert torch.equal(capped.scores, confidence.sort(descending=True).values[:20])
    assert any(10 < int((classwise_max_confidence(d.proposals, d.class_probs, 0.3) >= 0.2).sum()) < 100
               for d in batched)  # the in-between case happens


def test_no_box_passing_the_threshold_still_gives_min_regions(batched):
    detections = batched[0]
    confidence = classwise_max_confidence(detections.proposals, detections.class_probs, 0.3)
    assert (confidence < 0.99).all()
    regions = select_regions(detections, min_regions=10, max_regions=100, score_threshold=0.99)
    best = confidence.argsort(descending=True)[:10]
    assert len(regions.boxes) == 10
    assert torch.equal(regions.scores, confidence[best])
    assert torch.equal(regions.boxes, detections.proposals[best])
    assert torch.equal(regions.features, detections.features[best])
    assert torch.equal(regions.labels, detections.class_probs[best, 1:].argmax(dim=1))
    assert torch.equal(regions.attributes, detections.attribute_probs[best, 1:].argmax(dim=1))


def test_regressed_boxes_are_those_of_each_proposals_best_class(batched):
    detections = batched[1]
    regions = select_regions(detections, num_regions=36, box_source="regressed")
    decoded = clip_boxes(decode_boxes(detections.proposals, detections.box_deltas), detections.image_size)
    best = detections.class_probs[:, 1:].argmax(dim=1) + 1
    per_proposal = torch.stack([decoded[i, 4 * c:4 * c + 4] for i, c in enumerate(best.tolist())])
    matches = [(per_proposal == box).all(dim=1).nonzero().flatten() for box in regions.boxes]
    assert all(len(m) >= 1 for m in matches)
    h, w = detections.image_size
    assert regions.boxes.min() >= 0 and (regions.boxes[:, 2] <= w - 1).all() and (regions.boxes[:, 3] <= h - 1).all()
    for box, features, found in zip(regions.boxes, regions.features, matches, strict=True):
        assert any(torch.equal(features, detections.features[int(i)]) for i in found)
        assert torch.equal(box, per_proposal[int(found[0])])


def test_a_batch_of_different_sizes_equals_each_image_alone(batched, singles):
    for together, alone in zip(batched, singles, strict=True):
        assert together.image_size == alone.image_size and together.scale == alone.scale
        assert together.proposals.shape == alone.proposals.shape
        for name in ("proposals", "class_probs", "box_deltas", "attribute_probs", "features"):
            torch.testing.assert_close(getattr(together, name), getattr(alone, name), rtol=1e-4, atol=1e-4)
        a, b = select_regions(together), select_regions(alone)
        assert torch.equal(a.labels, b.labels) and torch.equal(a.attributes, b.attributes)
        for name in ("boxes", "features", "scores", "label_scores", "attribute_scores"):
            torch.testing.assert_close(getattr(a, name), getattr(b, name), rtol=1e-4, atol=1e-4)



def test_under_autocast_the_box_arithmetic_and_softmax_run_in_float32(model, images):
    """Under bf16 autocast the RPN and the class scores come out of their layers in bf16; the proposals must then be
    exactly what float32 arithmetic makes of those same values (a detector fed them, widened, without autocast),
    and the class probabilities the float32 softmax of the bf16 logits."""
    seen = {}
    hooks = [model.rpn.register_forward_hook(lambda module, args, output: seen.update(rpn=output)),
             model.predictor.cls_score.register_forward_hook(lambda module, args, output: seen.update(logits=output))]
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model.detect(images)
    finally:
        for hook in hooks:
            hook.remove()
    assert {t.dtype for t in (*seen["rpn"], seen["logits"])} == {torch.bfloat16}
    for detections in low:
        for name in ("proposals", "class_probs", "box_deltas", "attribute_probs", "features"):
            assert getattr(detections, name).dtype == torch.float32, name
    class_probs = torch.cat([detections.class_probs for detections in low])
    assert torch.equal(class_probs, seen["logits"].float().softmax(dim=1))
    widened = tuple(t.float() for t in seen["rpn"])
    hook = model.rpn.register_forward_hook(lambda module, args, output: widened)
    try:
        full = model.detect(images)
    finally:
        hook.remove()
    for a, b in zip(low, full, strict=True):
        assert torch.equal(a.proposals, b.proposals)


def test_forward_is_deterministic(model, images):
    first, second = model(images[2:], num_regions=36), model(images[2:], num_regions=36)
    for a, b in zip(first, second, strict=True):
        for name in ("boxes", "features", "labels", "label_scores", "attributes", "attribute_scores", "scores"):
            assert torch.equal(getattr(a, name), getattr(b, name))


def test_bgr_input_equals_rgb_input(model, images):
    rgb = model.detect(images[:1])[0]
    bgr = model.detect([images[0].flip(0)], channel_order="bgr")[0]
    assert torch.equal(rgb.features, bgr.features) and torch.equal(rgb.proposals, bgr.proposals)


def test_label_names_from_plain_lists(batched):
    regions = select_regions(batched[0], num_regions=36)
    objects = [f"object{i}" for i in range(8)]
    attributes = [f"attribute{i}" for i in range(4)]
    names, attrs = label_names(regions, objects, attributes, num_objects=8, num_attributes=4)
    assert names == [f"object{int(i)}" for i in regions.labels]
    with_background = label_names(regions, ["__background__", *objects], ["__no_attribute__", *attributes], 8, 4)
    assert with_background == (names, attrs)
    with pytest.raises(ValueError, match="vocabulary of 3 names"):
        label_names(regions, objects[:3], attributes, 8, 4)

"""Importing released bottom-up-attention weights (vltools.data.converters.bottom_up_weights): files written by the
test in the released key layouts (MILVLG's detectron2 `.pth`, airsplay's detectron2 `.pkl`) from a small random
model convert back to exactly that model; a missing, extra or misshapen entry, a truncated file and an untrusted
pickle are refused in one line naming the problem."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from vltools.data.converters.bottom_up_weights import (
    bottom_up_checkpoint,
    convert_bottom_up_weights,
    expected_shapes,
)
from vltools.errors import VLToolsError
from vltools.models.bottom_up import BottomUpAttention, caffe_anchors

TINY = {"stem_channels": 4, "res2_channels": 8, "bottleneck_channels": 2, "blocks": [1, 2, 1], "res5_blocks": 2,
        "pool_size": 5, "rpn_channels": 8, "anchor_scales": [1, 2], "rpn_pre_nms": 200, "rpn_post_nms": 40,
        "rpn_min_size": 4, "num_classes": 9, "num_attributes": 5, "class_embedding": 4, "attribute_hidden": 8,
        "test_scale": 96, "test_max_size": 160}


def tiny_model(seed: int = 0) -> BottomUpAttention:
    """Every weight and batch-norm statistic random, so that a wrong mapping shows."""
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
        for module in (model.predictor.cls_score, model.predictor.attr_score, model.rpn.objectness):
            module.bias.normal_(0.0, 0.1)
    return model


def released_name(key: str) -> str:
    """vltools name -> the name in MILVLG's checkpoint (bua/caffe/modeling: backbone, BUARPN, BUACaffeRes5ROIHeads)."""
    if key == "rpn.cell_anchors":
        return "proposal_generator.anchor_generator.cell_anchors.0"
    for ours, theirs in (("rpn.objectness.", "proposal_generator.rpn_head.objectness_logits."),
                         ("rpn.deltas.", "proposal_generator.rpn_head.anchor_deltas."),
                         ("rpn.", "proposal_generator.rpn_head."),
                         ("res5.", "roi_heads.res5."),
                         ("predictor.attr_fc.", "roi_heads.box_predictor.attr_linear1."),
                         ("predictor.attr_score.", "roi_heads.box_predictor.attr_linear2."),
                         ("predictor.", "roi_heads.box_predictor.")):
        if key.startswith(ours):
            return theirs + key[len(ours):]
    return key


def milvlg_state(model: BottomUpAttention) -> dict[str, torch.Tensor]:
    """The model's weights as MILVLG's converted checkpoint names them, with BatchNorm counters in res4 and res5
    (detectron2 "BN" there) and detectron2's pixel buffers, which carry no weights."""
    state = {released_name(key): value.clone() for key, value in model.state_dict().items()}
    for key in [k for k in state if k.endswith("norm.running_var") and k.startswith(("backbone.res4", "roi_heads"))]:
        state[key.replace("running_var", "num_batches_tracked")] = torch.tensor(0)
    state["pixel_mean"] = torch.tensor([102.9801, 115.9465, 122.7717]).view(3, 1, 1)
    return state


def rpn_in_order(state: dict[str, torch.Tensor], order: list[int], prefix: str = "proposal_generator.",
                 anchors: str = "proposal_generator.anchor_generator.cell_anchors.0") -> dict[str, torch.Tensor]:
    """A released state dict whose anchor k is anchor order[k] of `state`, with its RPN objectness (background
    block, then object block) and delta channels (4 per anchor) moved along."""
    index = torch.tensor(order)
    count = len(order)
    rows = {"objectness_logits": torch.cat([index, index + count]),
            "anchor_deltas": (index[:, None] * 4 + torch.arange(4)).reshape(-1)}
    moved = {anchors: state[anchors][index]}
    for head, head_rows in rows.items():
        for name in ("weight", "bias"):
            key = f"{prefix}rpn_head.{head}.{name}"
            moved[key] = state[key][head_rows]
    return {**state, **moved}


def detectron2_anchors() -> tuple[torch.Tensor, list[int]]:
    """TINY's cell anchors as detectron2's DefaultAnchorGenerator makes them (sizes 16 x scale outer, ratios inner,
    centred on 0, widths not rounded), and for each of them the index of the Caffe anchor it stands for."""
    ratios, scales = [0.5, 1.0, 2.0], TINY["anchor_scales"]
    anchors, caffe_index = [], []
    for s, scale in enumerate(scales):
        for r, ratio in enumerate(ratios):
            w = (16.0 * scale) / ratio ** 0.5
            h = ratio * w
            anchors.append([-w / 2, -h / 2, w / 2, h / 2])
            caffe_index.append(r * len(scales) + s)
    return torch.tensor(anchors), caffe_index


def airsplay_state(model: BottomUpAttention) -> dict[str, np.ndarray]:
    """The model's weights in py-bottom-up-attention's detectron2 conventions: one objectness logit per anchor
    (foreground minus background), background and "no attribute" last, no background box regressor, deltas scaled
    by (10, 10, 5, 5), cls_embedding / fc_attr / attr_score, detectron2's own cell anchors in detectron2's order
    with the RPN channels in that order too."""
    sd = model.state_dict()
    count = sd["rpn.cell_anchors"].shape[0]
    anchors, order = detectron2_anchors()
    index = torch.tensor(order)
    deltas = (index[:, None] * 4 + torch.arange(4)).reshape(-1)
    last = {k: torch.cat([sd[k][1:], sd[k][:1]]) for k in ("predictor.cls_score.weight", "predictor.cls_score.bias",
                                                           "predictor.cls_embed.weight", "predictor.attr_score.weight",
                                                           "predictor.attr_score.bias")}
    scale = torch.tensor([10.0, 10.0, 5.0, 5.0]).repeat(TINY["num_classes"] - 1)
    state = {key: value for key, value in sd.items() if key.startswith(("backbone.", "res5."))}
    state = {("roi_heads." + k if k.startswith("res5.") else k): v for k, v in state.items()}
    state.update({
        "proposal_generator.rpn_head.conv.weight": sd["rpn.conv.weight"],
        "proposal_generator.rpn_head.conv.bias": sd["rpn.conv.bias"],
        "proposal_generator.rpn_head.objectness_logits.weight":
            (sd["rpn.objectness.weight"][count:] - sd["rpn.objectness.weight"][:count])[index],
        "proposal_generator.rpn_head.objectness_logits.bias":
            (sd["rpn.objectness.bias"][count:] - sd["rpn.objectness.bias"][:count])[index],
        "proposal_generator.rpn_head.anchor_deltas.weight": sd["rpn.deltas.weight"][deltas],
        "proposal_generator.rpn_head.anchor_deltas.bias": sd["rpn.deltas.bias"][deltas],
        "proposal_generator.anchor_generator.cell_anchors.0": anchors,
        "roi_heads.box_predictor.cls_score.weight": last["predictor.cls_score.weight"],
        "roi_heads.box_predictor.cls_score.bias": last["predictor.cls_score.bias"],
        "roi_heads.box_predictor.bbox_pred.weight": sd["predictor.bbox_pred.weight"][4:] * scale[:, None],
        "roi_heads.box_predictor.bbox_pred.bias": sd["predictor.bbox_pred.bias"][4:] * scale,
        "roi_heads.box_predictor.cls_embedding.weight": last["predictor.cls_embed.weight"],
        "roi_heads.box_predictor.fc_attr.weight": sd["predictor.attr_fc.weight"],
        "roi_heads.box_predictor.fc_attr.bias": sd["predictor.attr_fc.bias"],
        "roi_heads.box_predictor.attr_score.weight": last["predictor.attr_score.weight"],
        "roi_heads.box_predictor.attr_score.bias": last["predictor.attr_score.bias"],
    })
    return {key: value.numpy().copy() for key, value in state.items()}


@pytest.fixture(scope="module")
def model() -> BottomUpAttention:
    return tiny_model()


@pytest.fixture
def released(tmp_path, model):
    """A MILVLG-layout checkpoint (detectron2 {"model": ...} wrapper) and its state dict, for editing."""
    state = milvlg_state(model)
    path = tmp_path / "bua-caffe-frcn-r101-k10-100.pth"
    torch.save({"model": state, "__author__": "test"}, path)
    return path, state


def image() -> torch.Tensor:
    return torch.randint(0, 256, (3, 70, 90), generator=torch.Generator().manual_seed(3), dtype=torch.uint8)


def test_the_released_key_layout_is_the_one_converted(released):
    _, state = released
    for key in ("backbone.stem.conv1.weight", "backbone.stem.conv1.norm.running_var", "backbone.res2.0.conv1.weight",
                "backbone.res2.0.shortcut.norm.bias", "backbone.res3.1.conv2.weight",
                "proposal_generator.rpn_head.conv.weight", "proposal_generator.rpn_head.objectness_logits.bias",
                "proposal_generator.rpn_head.anchor_deltas.weight", "roi_heads.res5.0.shortcut.weight",
                "roi_heads.res5.1.conv3.norm.running_mean", "roi_heads.box_predictor.cls_score.weight",
                "roi_heads.box_predictor.bbox_pred.bias", "roi_heads.box_predictor.cls_embed.weight",
                "roi_heads.box_predictor.attr_linear1.weight", "roi_heads.box_predictor.attr_linear2.bias"):
        assert key in state, key
    assert state["roi_heads.box_predictor.attr_linear1.weight"].shape == (8, 64 + 4)


def test_round_trip_loads_strictly_and_computes_the_same(released, model):
    path, _ = released
    converted = convert_bottom_up_weights(path, trust=False, config=TINY)
    assert set(converted) == set(model.state_dict())
    for key, value in model.state_dict().items():
        assert torch.equal(converted[key], value), key
        assert converted[key].dtype == torch.float32
    fresh = BottomUpAttention(**TINY).eval()
    fresh.load_state_dict(converted, strict=True)
    a, b = model([image()], num_regions=12)[0], fresh([image()], num_regions=12)[0]
    assert torch.equal(a.boxes, b.boxes) and torch.equal(a.features, b.features)


def test_a_bare_state_dict_converts_too(tmp_path, released, model):
    _, state = released
    path = tmp_path / "bare.pth"
    torch.save(state, path)
    assert torch.equal(convert_bottom_up_weights(path, False, TINY)["res5.1.conv2.weight"],
                       model.state_dict()["res5.1.conv2.weight"])


def test_caffe_anchors_are_used_when_the_file_has_none(tmp_path, released):
    _, state = released
    del state["proposal_generator.anchor_generator.cell_anchors.0"]
    path = tmp_path / "no-anchors.pth"
    torch.save({"model": state}, path)
    anchors = convert_bottom_up_weights(path, False, TINY)["rpn.cell_anchors"]
    assert torch.equal(anchors, caffe_anchors(16, [0.5, 1.0, 2.0], [1, 2]))


def test_anchors_stored_in_another_order_convert_to_the_same_detector(tmp_path, released, model):
    """The file's anchors say which RPN channels belong to which anchor: a file storing them in another order
    (with its channels in that order) is the same detector, and converts to exactly the same one."""
    _, state = released
    order = [4, 0, 5, 2, 1, 3]
    path = tmp_path / "permuted.pth"
    torch.save({"model": rpn_in_order(state, order)}, path)
    converted = convert_bottom_up_weights(path, trust=False, config=TINY)
    for key, value in model.state_dict().items():
        assert torch.equal(converted[key], value), key
    fresh = BottomUpAttention(**TINY).eval()
    fresh.load_state_dict(converted, strict=True)
    features = torch.randn(1, 32, 5, 6, generator=torch.Generator().manual_seed(1))
    for ours, theirs in zip(fresh.rpn(features), model.rpn(features), strict=True):
        assert torch.equal(ours, theirs)


@pytest.mark.parametrize(("anchors", "needle"), [
    (lambda a: a * 3, "cell anchor 0 is 67x34 pixels, which is no anchor of the bottom-up detector's RPN "
                      "(the nearest Caffe anchor is 46x24)"),
    (lambda a: a[[0, 0, 2, 3, 4, 5]], "cell anchors 0 and 1 both match the Caffe anchor 23x12"),
    (lambda a: a * 0, "cell anchor 0 is 1x1 pixels"),
    (lambda a: -a, "the cell anchors are not boxes"),
], ids=["sizes", "duplicate", "zeros", "inverted"])
def test_anchors_that_are_not_the_caffe_anchors_are_refused(tmp_path, released, anchors, needle):
    _, state = released
    key = "proposal_generator.anchor_generator.cell_anchors.0"
    state[key] = anchors(state[key])
    path = tmp_path / "other-anchors.pth"
    torch.save({"model": state}, path)
    message = one_line_error(path)
    assert f"'{key}'" in message and needle in message


def one_line_error(path, config=TINY, trust=False) -> str:
    with pytest.raises(VLToolsError) as caught:
        convert_bottom_up_weights(path, trust=trust, config=config)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    return message


def test_a_missing_weight_is_named(tmp_path, released):
    _, state = released
    del state["roi_heads.box_predictor.attr_linear2.bias"]
    path = tmp_path / "missing.pth"
    torch.save({"model": state}, path)
    message = one_line_error(path)
    assert "1 weight of the bottom-up detector is missing" in message
    assert "'roi_heads.box_predictor.attr_linear2.bias'" in message


def test_an_extra_entry_is_named(tmp_path, released):
    _, state = released
    state["roi_heads.mask_head.predictor.weight"] = torch.zeros(3)
    path = tmp_path / "extra.pth"
    torch.save({"model": state}, path)
    message = one_line_error(path)
    assert "1 unexpected entry" in message and "'roi_heads.mask_head.predictor.weight'" in message


def test_a_wrong_shape_is_named(tmp_path, released):
    _, state = released
    state["roi_heads.box_predictor.cls_score.weight"] = torch.zeros(10, 64)
    path = tmp_path / "shape.pth"
    torch.save({"model": state}, path)
    message = one_line_error(path)
    assert "'roi_heads.box_predictor.cls_score.weight' has shape (10, 64)" in message and "(9, 64)" in message


def test_the_released_size_is_what_is_expected_by_default(released):
    path, _ = released  # the small model's file against the default (released) configuration
    message = one_line_error(path, config=None)
    assert "weights of the bottom-up detector are missing" in message and "'backbone.res2.1.conv1.weight'" in message
    shapes = expected_shapes()
    assert shapes["predictor.bbox_pred.weight"] == (6404, 2048) and shapes["rpn.cell_anchors"] == (12, 4)


@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy"])
def test_a_truncated_file_is_refused_in_one_line(tmp_path, released, zipped):
    _, state = released
    whole = tmp_path / "whole.pth"
    torch.save({"model": state}, whole, _use_new_zipfile_serialization=zipped)
    truncated = tmp_path / "truncated.pth"
    truncated.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    assert "truncated or corrupt" in one_line_error(truncated)
    assert "truncated or corrupt" in one_line_error(truncated, trust=True)


def test_missing_empty_and_foreign_files_are_refused(tmp_path):
    assert "no such file" in one_line_error(tmp_path / "absent.pth")
    (tmp_path / "empty.pth").write_bytes(b"")
    assert "empty file" in one_line_error(tmp_path / "empty.pth")
    torch.save({"model": {"fc.weight": torch.zeros(2, 2)}}, tmp_path / "other.pth")
    assert "not a released bottom-up-attention detector" in one_line_error(tmp_path / "other.pth")


def test_a_pickle_needs_trust_and_then_converts(tmp_path, released, model):
    _, state = released
    path = tmp_path / "bua.pkl"
    with open(path, "wb") as stream:  # detectron2's .pkl: a plain pickle of numpy arrays
        pickle.dump({"model": {k: v.numpy() for k, v in state.items()}, "__author__": "test"}, stream)
    assert "pass trust=True if you trust" in one_line_error(path)
    converted = convert_bottom_up_weights(path, trust=True, config=TINY)
    for key, value in model.state_dict().items():
        assert torch.equal(converted[key], value), key


def test_the_airsplay_layout_gives_the_same_detections(tmp_path, model):
    path = tmp_path / "faster_rcnn_from_caffe_attr.pkl"
    with open(path, "wb") as stream:
        pickle.dump({"model": airsplay_state(model), "__author__": "test"}, stream)
    converted = convert_bottom_up_weights(path, trust=True, config=TINY)
    assert torch.equal(converted["rpn.cell_anchors"], model.rpn.cell_anchors)  # Caffe's, not detectron2's
    fresh = BottomUpAttention(**TINY).eval()
    fresh.load_state_dict(converted, strict=True)
    a, b = model.detect([image()])[0], fresh.detect([image()])[0]
    for name in ("proposals", "class_probs", "attribute_probs", "features"):
        torch.testing.assert_close(getattr(a, name), getattr(b, name), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(a.box_deltas[:, 4:], b.box_deltas[:, 4:], rtol=1e-5, atol=1e-5)


def test_checkpoint_payload_saves_and_loads_safely(tmp_path, released, model):
    from vltools.io.checkpoints import load_checkpoint, save_checkpoint

    path, _ = released
    payload = bottom_up_checkpoint(path, trust=False, config=TINY)
    assert payload["model"] == "bottom-up" and payload["vocab"] is None
    assert payload["train_state"]["layout"] == "bottom-up-attention.pytorch"
    assert payload["train_state"]["converted_from"] == path.name and len(payload["train_state"]["source_sha256"]) == 64
    save_checkpoint(tmp_path / "bua.pt", **payload)
    loaded = load_checkpoint(tmp_path / "bua.pt")
    fresh = BottomUpAttention(**loaded["config"]).eval()
    fresh.load_state_dict(loaded["state_dict"], strict=True)
    assert torch.equal(fresh.predictor.attr_fc.weight, model.predictor.attr_fc.weight)


def test_convert_command_refuses_weights_of_another_size_in_one_line(released, tmp_path):
    from conftest import run_vltools

    path, _ = released
    result = run_vltools("convert", "bottom-up-weights", path, "-o", tmp_path / "bua.pt")
    err = result.stderr.decode()
    assert result.returncode == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert path.name in err and "the file is incomplete or of another model" in err
    assert not (tmp_path / "bua.pt").exists()

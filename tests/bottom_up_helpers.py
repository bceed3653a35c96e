"""A tiny bottom-up-attention detector checkpoint for the tests of `extract-regions --regions bottom-up`: random
weights saved in the released (MILVLG) key layout, then converted as `vltools convert bottom-up-weights` does."""

from __future__ import annotations

from pathlib import Path

import torch
from test_convert_bottom_up_weights import TINY, milvlg_state, tiny_model

from vltools.data.converters.bottom_up_weights import bottom_up_checkpoint
from vltools.io.checkpoints import save_checkpoint
from vltools.models.bottom_up import BottomUpAttention

FEATURE_DIM = 64  # twice TINY's res4 width (8 -> 16 -> 32 channels)


def save_tiny_detector(folder: Path, seed: int = 0, model: BottomUpAttention | None = None) -> Path:
    """`folder`/tiny_bua.pt: `model` (by default the tiny random detector of tests/test_convert_bottom_up_weights.py),
    written as a released checkpoint (`folder`/bua-caffe-frcn-r101-k10-100.pth) and converted from it."""
    released = folder / "bua-caffe-frcn-r101-k10-100.pth"
    torch.save({"model": milvlg_state(model if model is not None else tiny_model(seed))}, released)
    path = folder / "tiny_bua.pt"
    save_checkpoint(path, **bottom_up_checkpoint(released, trust=False, config=TINY))
    return path


def decisive_model(seed: int = 0) -> BottomUpAttention:
    """The tiny random detector with every decision of the released extraction far from a tie, so that bf16's
    rounding of the convolutions and linear layers cannot change which boxes are kept or their order: the RPN's 3x3
    conv is zeroed (each anchor kind gets the same deltas at every position) and its object logits raised by 40
    (every anchor scores exactly 1 in float32: proposals ranked by position), and object class 0 gets 50 logits more
    than any other (a probability of exactly 1). The backbone, RoI head and predictor keep their random weights, so
    the photos still set the features, the scores and the attributes.

    Random weights alone cannot give that: their objectness and class scores differ by less than bf16's error, and
    scaling the weights up scales that error with them."""
    model = tiny_model(seed)
    anchors = model.rpn.cell_anchors.shape[0]
    with torch.no_grad():
        model.rpn.conv.weight.zero_()
        model.rpn.objectness.bias[anchors:] += 40.0
        model.predictor.cls_score.bias[1] += 50.0
    return model

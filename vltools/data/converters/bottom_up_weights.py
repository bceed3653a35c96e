"""Import released weights of the bottom-up-attention detector into vltools' `BottomUpAttention`.

Two releases of the Caffe model (peteanderson80/bottom-up-attention, ResNet-101, 1600 classes, 400 attributes) as
detectron2 state dicts:

- MILVLG/bottom-up-attention.pytorch, `bua-caffe-frcn-r101-k10-100.pth` (formerly
  `bua-caffe-frcn-r101_with_attributes.pth`) and `bua-caffe-frcn-r101-k36.pth`: the Caffe layout under detectron2
  names (`bua/caffe/modeling/`): `backbone.{stem,res2,res3,res4}...` (conv `weight` and `norm.{weight,bias,
  running_mean,running_var}`), `proposal_generator.rpn_head.{conv,objectness_logits,anchor_deltas}` (2A Caffe
  objectness channels, background first), `roi_heads.res5.*`, `roi_heads.box_predictor.{cls_score,bbox_pred,
  cls_embed,attr_linear1,attr_linear2}` with background as class 0 and "no attribute" as attribute 0. The module
  names map one to one; `proposal_generator.anchor_generator.cell_anchors.0`, when the file has it, is kept (it is
  what the port runs, since detectron2 loads this buffer over the anchors its config generates), put in Caffe's
  order (see below), and otherwise the Caffe anchors are used.
- airsplay/py-bottom-up-attention, `faster_rcnn_from_caffe_attr.pkl` (a detectron2 pickle of numpy arrays): the
  same backbone and res5 names, but in detectron2's conventions (`detectron2/modeling/roi_heads/fast_rcnn.py`,
  `proposal_generator/rpn.py` of that fork and its demo notebooks): one sigmoid objectness logit per anchor,
  background last among the 1601 classes, 1600 class-specific box regressors scaled by the ROI head's
  BBOX_REG_WEIGHTS (10, 10, 5, 5), "no attribute" last among the 401 attributes, and `cls_embedding`, `fc_attr`,
  `attr_score` for the attribute branch. These are mapped back: objectness (0, logit) per anchor (the same
  softmax), classes and attributes rotated so that background and "no attribute" come first, zero deltas for the
  background and the deltas divided by (10, 10, 5, 5). Its anchors' values (detectron2's, which that fork centres
  and sizes slightly differently on purpose) are not used: the Caffe anchors the RPN was trained with are. This
  mapping follows that code; it was not checked against the file itself.

The RPN's channels are paired with anchors by position: channel k (objectness k and A + k, deltas 4k .. 4k + 3)
belongs to cell anchor k. vltools runs them in Caffe's order (ratios outer, scales inner), while detectron2
generates sizes outer, ratios inner. So when a file holds its cell anchors, each one is matched to the Caffe anchor
of the same width and height (within 20%, one to one), and the objectness and delta channels are permuted into
Caffe's order with it; a file whose anchors do not match the Caffe anchors is refused, naming the first that
differs.

Files are read with `torch.load(weights_only=True)`; a pickle (the .pkl, or a .pth holding other objects) is read
only with `trust=True`, since unpickling can run code from the file.
"""

from __future__ import annotations

import hashlib
import math
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import torch

from vltools.errors import VLToolsError, argument, first_line, shown_ids
from vltools.io.checkpoints import NeedsPickle, load_weights_only, save_checkpoint
from vltools.models import schema_version
from vltools.models.bottom_up import BottomUpAttention, caffe_anchors

MODEL_NAME = "bottom-up"
MILVLG = "bottom-up-attention.pytorch"
AIRSPLAY = "py-bottom-up-attention"
ANCHORS = "rpn.cell_anchors"
ANCHOR_TOLERANCE = 1.2  # a file's anchor matches a Caffe anchor when its width and height are within this factor
# (released prefix, vltools prefix), for each layout
RENAMES: dict[str, tuple[tuple[str, str], ...]] = {
    MILVLG: (
        ("backbone.", "backbone."),
        ("proposal_generator.rpn_head.conv.", "rpn.conv."),
        ("proposal_generator.rpn_head.objectness_logits.", "rpn.objectness."),
        ("proposal_generator.rpn_head.anchor_deltas.", "rpn.deltas."),
        ("proposal_generator.anchor_generator.cell_anchors.0", ANCHORS),
        ("roi_heads.res5.", "res5."),
        ("roi_heads.box_predictor.cls_score.", "predictor.cls_score."),
        ("roi_heads.box_predictor.bbox_pred.", "predictor.bbox_pred."),
        ("roi_heads.box_predictor.cls_embed.", "predictor.cls_embed."),
        ("roi_heads.box_predictor.attr_linear1.", "predictor.attr_fc."),
        ("roi_heads.box_predictor.attr_linear2.", "predictor.attr_score."),
    ),
    AIRSPLAY: (
        ("backbone.", "backbone."),
        ("proposal_generator.rpn_head.conv.", "rpn.conv."),
        ("proposal_generator.rpn_head.objectness_logits.", "rpn.objectness."),
        ("proposal_generator.rpn_head.anchor_deltas.", "rpn.deltas."),
        ("proposal_generator.anchor_generator.cell_anchors.0", ANCHORS),
        ("roi_heads.res5.", "res5."),
        ("roi_heads.box_predictor.cls_score.", "predictor.cls_score."),
        ("roi_heads.box_predictor.bbox_pred.", "predictor.bbox_pred."),
        ("roi_heads.box_predictor.cls_embedding.", "predictor.cls_embed."),
        ("roi_heads.box_predictor.fc_attr.", "predictor.attr_fc."),
        ("roi_heads.box_predictor.attr_score.", "predictor.attr_score."),
    ),
}
# what a layout is recognised by
MARKERS = {MILVLG: "roi_heads.box_predictor.attr_linear1.weight", AIRSPLAY: "roi_heads.box_predictor.fc_attr.weight"}
# entries that carry no weights: BatchNorm's update counter and detectron2's input normalisation buffers
IGNORED_SUFFIXES = (".num_batches_tracked",)
IGNORED_KEYS = ("pixel_mean", "pixel_std")
AIRSPLAY_BOX_WEIGHTS = (10.0, 10.0, 5.0, 5.0)  # detectron2's default ROI_BOX_HEAD.BBOX_REG_WEIGHTS


def read_released_weights(source: str | os.PathLike, trust: bool) -> dict[str, torch.Tensor]:
    """The released file's state dict (name -> tensor), unwrapped from detectron2's {"model": ...}; numpy arrays
    become tensors. Refuses in one line a missing, empty, truncated or corrupt file, and a pickle without `trust`."""
    path = Path(source)
    raw = _load(path, trust)
    state = raw.get("model", raw) if isinstance(raw, dict) else raw
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not state:
        raise VLToolsError(f"{path}: not a detector checkpoint (expected a state dict, or a dict with 'model')")
    tensors = {}
    for key, value in state.items():
        if isinstance(value, torch.Tensor):
            tensors[str(key)] = value
        elif isinstance(value, (np.ndarray, np.generic)):
            tensors[str(key)] = torch.from_numpy(np.array(value))
        else:
            raise VLToolsError(f"{path}: entry {key!r} is a {type(value).__name__}, not a tensor; not a detector "
                               "checkpoint")
    return tensors


def _load(path: Path, trust: bool) -> object:
    """The safe loader (vltools.io.checkpoints); with `trust`, a file that needs pickle goes through torch's full
    unpickler, then plain pickle (detectron2's .pkl)."""
    corrupt = f"{path}: not a readable checkpoint, it is truncated or corrupt"
    try:
        return load_weights_only(path, "checkpoint", "no such file",
                                 "empty file, not a checkpoint; it may be from an interrupted download, fetch it again",
                                 f"pass {argument('trust', 'True')} if you trust where it came from")
    except NeedsPickle:
        if not trust:
            raise
    except VLToolsError:
        if not trust or zipfile.is_zipfile(path) or not _starts_as_pickle(path):
            raise
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # whatever an unpickler raises, the file is unusable as it is
        if zipfile.is_zipfile(path):
            raise VLToolsError(f"{corrupt} ({first_line(exc)})") from None
        torch_error = first_line(exc)
    try:  # a plain pickle, as detectron2 writes .pkl checkpoints (reached only with trust=True)
        with open(path, "rb") as stream:
            raw = pickle.load(stream, encoding="latin1")
    except Exception as exc:  # same
        raise VLToolsError(f"{corrupt} ({first_line(exc)})") from None
    if not isinstance(raw, dict):  # e.g. only the magic number of a truncated legacy torch file
        raise VLToolsError(f"{corrupt} ({torch_error})")
    return raw


def detect_layout(state: dict[str, torch.Tensor], where: object = "checkpoint") -> str:
    """Which release a state dict is: MILVLG's bottom-up-attention.pytorch or airsplay's py-bottom-up-attention."""
    found = [layout for layout, marker in MARKERS.items() if marker in state]
    if len(found) != 1:
        raise VLToolsError(f"{where}: not a released bottom-up-attention detector: expected "
                           f"{MARKERS[MILVLG]!r} ({MILVLG}) or {MARKERS[AIRSPLAY]!r} ({AIRSPLAY})")
    return found[0]


def _rename(key: str, layout: str) -> str | None:
    for released, ours in RENAMES[layout]:
        if key == released or (released.endswith(".") and key.startswith(released)):
            return ours + key[len(released):]
    return None


def _rotate_first(tensor: torch.Tensor) -> torch.Tensor:
    """Rows (n, ...) with the last row moved to the front: detectron2's background-last -> background-first."""
    return torch.cat([tensor[-1:], tensor[:-1]])


def _from_airsplay(ours: str, tensor: torch.Tensor) -> torch.Tensor:
    """One airsplay tensor in the Caffe conventions of `BottomUpAttention` (see the module docstring)."""
    if ours.startswith(("predictor.cls_score.", "predictor.cls_embed.", "predictor.attr_score.")):
        return _rotate_first(tensor)
    if ours.startswith("rpn.objectness."):
        return torch.cat([torch.zeros_like(tensor), tensor])
    if ours.startswith("predictor.bbox_pred."):
        weights = torch.tensor(AIRSPLAY_BOX_WEIGHTS, dtype=tensor.dtype)
        shape = tensor.shape
        scaled = (tensor.reshape(-1, 4, *shape[1:]) / weights.reshape(1, 4, *([1] * (len(shape) - 1))))
        return torch.cat([torch.zeros((4, *shape[1:]), dtype=tensor.dtype), scaled.reshape(shape)])
    return tensor


def expected_shapes(config: dict | None = None) -> dict[str, tuple[int, ...]]:
    """The state-dict names and shapes of `BottomUpAttention(**config)` (built on the meta device: no memory)."""
    with torch.device("meta"):
        model = BottomUpAttention(**(config or {}))
    return {key: tuple(value.shape) for key, value in model.state_dict().items()}


def convert_state_dict(state: dict[str, torch.Tensor], config: dict | None = None,
                       where: object = "checkpoint") -> tuple[dict[str, torch.Tensor], str]:
    """A released state dict -> (the `BottomUpAttention(**config)` state dict, the layout's name). Every weight the
    model needs must be there with its shape, and nothing else (`where`, the file, names them in the error)."""
    layout = detect_layout(state, where)
    expected = expected_shapes(config)
    converted: dict[str, torch.Tensor] = {}
    origin: dict[str, str] = {}
    extra = []
    for key, tensor in state.items():
        if key.endswith(IGNORED_SUFFIXES) or key in IGNORED_KEYS:
            continue
        ours = _rename(key, layout)
        if ours is None or ours not in expected:
            extra.append(key)
            continue
        converted[ours] = _from_airsplay(ours, tensor) if layout == AIRSPLAY else tensor
        origin[ours] = key
    if extra:
        raise VLToolsError(f"{where}: {_count(len(extra), 'unexpected entry', 'unexpected entries')} for the "
                           f"bottom-up detector ({layout}): "
                           f"{shown_ids(sorted(extra))}; is it another model (ResNet-152, detectron2-trained)?")
    config_full = {**BottomUpAttention.DEFAULTS, **(config or {})}
    caffe = caffe_anchors(int(config_full["anchor_base"]), config_full["anchor_ratios"], config_full["anchor_scales"])
    converted.setdefault(ANCHORS, caffe)
    missing = [key for key in expected if key not in converted]
    if missing:
        names = [_released_name(key, layout) for key in missing]
        raise VLToolsError(f"{where}: {_count(len(missing), 'weight', 'weights')} of the bottom-up detector "
                           f"{'is' if len(missing) == 1 else 'are'} missing ({layout}): "
                           f"{shown_ids(names)}; the file is incomplete or of another model")
    for key, shape in expected.items():
        if tuple(converted[key].shape) != shape:
            name = origin.get(key, key)
            raise VLToolsError(f"{where}: {name!r} has shape {tuple(state[name].shape) if name in state else ()} "
                               f"but the bottom-up detector needs {shape} there (converted from {layout}); "
                               "is it another model or configuration?")
    if ANCHORS in origin:
        order = anchor_order(converted[ANCHORS], caffe, f"{where}: {origin[ANCHORS]!r}")
        converted.update(_rpn_in_order(converted, order))
        if layout == AIRSPLAY:
            converted[ANCHORS] = caffe
    return {key: converted[key].detach().to(torch.float32).contiguous() for key in expected}, layout


def _sizes(anchors: torch.Tensor) -> torch.Tensor:
    """(A, 4) x1, y1, x2, y2 -> (A, 2) widths and heights, Caffe's way (x2 - x1 + 1)."""
    anchors = anchors.to(torch.float64)
    return anchors[:, 2:] - anchors[:, :2] + 1.0


def anchor_order(anchors: torch.Tensor, caffe: torch.Tensor, where: object) -> list[int]:
    """For each Caffe anchor, the index of the file's anchor of the same width and height (within
    ANCHOR_TOLERANCE; the centres are not compared, detectron2 puts them elsewhere), or a one-line error naming
    `where` and the first anchor that has no match or shares one."""
    def size(wh: torch.Tensor) -> str:
        return f"{wh[0].item():g}x{wh[1].item():g}"

    theirs, ours = _sizes(anchors), _sizes(caffe)
    if not bool(torch.isfinite(theirs).all() and (theirs > 0).all()):
        raise VLToolsError(f"{where}: the cell anchors are not boxes (a width or height is zero, negative or not "
                           "finite); the file's RPN cannot be paired with anchors, fetch the file again")
    distance = (theirs[:, None].log() - ours[None].log()).abs().amax(dim=-1)  # (file, Caffe): the larger log ratio
    nearest = distance.argmin(dim=1)
    matched: dict[int, int] = {}
    for index, caffe_index in enumerate(nearest.tolist()):
        if distance[index, caffe_index] > math.log(ANCHOR_TOLERANCE):
            raise VLToolsError(f"{where}: cell anchor {index} is {size(theirs[index])} pixels, which is no anchor of "
                               f"the bottom-up detector's RPN (the nearest Caffe anchor is {size(ours[caffe_index])}); "
                               "is it another model or configuration?")
        if caffe_index in matched:
            raise VLToolsError(f"{where}: cell anchors {matched[caffe_index]} and {index} both match the Caffe anchor "
                               f"{size(ours[caffe_index])}, so the RPN channels cannot be paired with anchors; is it "
                               "another model or configuration?")
        matched[caffe_index] = index
    return [matched[i] for i in range(len(caffe))]


def _rpn_in_order(state: dict[str, torch.Tensor], order: list[int]) -> dict[str, torch.Tensor]:
    """The anchors and the RPN's objectness (A background, A object) and delta (4 per anchor) outputs of a state
    dict, anchor k of the result being anchor order[k] of `state`."""
    count = len(order)
    index = torch.tensor(order)
    objectness = torch.cat([index, index + count])
    deltas = (index[:, None] * 4 + torch.arange(4)).reshape(-1)
    return {ANCHORS: state[ANCHORS][index],
            **{f"rpn.objectness.{n}": state[f"rpn.objectness.{n}"][objectness] for n in ("weight", "bias")},
            **{f"rpn.deltas.{n}": state[f"rpn.deltas.{n}"][deltas] for n in ("weight", "bias")}}


def _count(number: int, one: str, many: str) -> str:
    return f"{number} {one if number == 1 else many}"


def _released_name(ours: str, layout: str) -> str:
    for released, prefix in RENAMES[layout]:
        if ours == prefix or (prefix.endswith(".") and ours.startswith(prefix)):
            return released + ours[len(prefix):]
    return ours


def convert_bottom_up_weights(source: str | os.PathLike, trust: bool, config: dict | None = None
                              ) -> dict[str, torch.Tensor]:
    """The released checkpoint at `source` as a `BottomUpAttention(**config)` state dict (float32), checked
    entry by entry. `config` defaults to the released model."""
    state = read_released_weights(source, trust)
    return convert_state_dict(state, config, where=Path(source))[0]


def bottom_up_checkpoint(source: str | os.PathLike, trust: bool, config: dict | None = None) -> dict:
    """The released checkpoint as keyword arguments of `vltools.io.checkpoints.save_checkpoint`: model
    "bottom-up", its full config, the converted state dict, no vocabulary (the class and attribute names are
    data), and in `train_state` where it came from (file name, layout, SHA-256 of the file)."""
    path = Path(source)
    state = read_released_weights(path, trust)
    state_dict, layout = convert_state_dict(state, config, where=path)
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    full_config = {**BottomUpAttention.DEFAULTS, **(config or {})}
    return {"model": MODEL_NAME, "config": full_config, "state_dict": state_dict, "vocab": None,
            "train_state": {"converted_from": path.name, "layout": layout, "source_sha256": digest.hexdigest()},
            "schema": schema_version(MODEL_NAME)}


def save_bottom_up_checkpoint(weights: str | os.PathLike, output: str | os.PathLike,
                              trust: bool = False) -> dict[str, str]:
    """`vltools convert bottom-up-weights`: the released detector weights as a vltools checkpoint of the
    `bottom-up` detector at `output`; returns {"layout": the release's layout}."""
    payload = bottom_up_checkpoint(weights, trust)
    save_checkpoint(output, **payload)
    return {"layout": payload["train_state"]["layout"]}


def _starts_as_pickle(path: Path) -> bool:
    """Whether the file begins with a pickle protocol opcode (a .pkl, or a legacy torch file)."""
    with open(path, "rb") as stream:
        return stream.read(1) == b"\x80"

"""The bottom-up-attention detector (Anderson et al., CVPR 2018) in plain PyTorch + torchvision, for the released
Visual Genome weights (1600 object classes + background, 400 attributes + "no attribute").

What the released model computes (peteanderson80/bottom-up-attention
`models/vg/ResNet-101/faster_rcnn_end2end_final/test.prototxt`, ported to detectron2 by
MILVLG/bottom-up-attention.pytorch `bua/caffe/modeling/*.py` with `configs/caffe/test-caffe-r101.yaml`):

- Backbone: ResNet-101 up to res4 (stride 16) in the MSRA/Caffe form: stem conv 7x7/2 + BN + ReLU + max-pool 3x3/2
  with no padding and rounding up (Caffe pooling); bottleneck blocks with the stride on the first 1x1 conv; every
  batch norm frozen, y = (x - mean) / sqrt(var + 1e-5) * weight + bias.
- RPN on res4: 3x3 conv (512) + ReLU, a 1x1 conv with 2A outputs (A background logits then A foreground logits,
  a softmax over each pair) and a 1x1 conv with 4A deltas. A = 12 Caffe anchors (`lib/rpn/generate_anchors.py`:
  base 16, ratios 0.5, 1, 2 outer, scales 4, 8, 16, 32 inner, so 64 to 512 pixels, centred at 7.5 + 16 k).
  Proposals: decode, clip to the resized image, drop boxes under 16 original pixels a side, top 6000 by score,
  NMS 0.7, top 300 (`lib/rpn/proposal_layer.py`, cfg.TEST.RPN_*).
- RoI head: RoIPool 14x14 of res4 (spatial scale 1/16; torchvision's roi_pool is Caffe's ROIPooling), res5 as 3
  bottleneck blocks with stride 1 and dilation 2 in the 3x3 convs (prototxt `res5a_branch2b`: dilation 2, pad 2;
  detectron2 RES5_DILATION 2), mean over the 14x14 cells -> pool5 (2048). cls_score 1601 (softmax),
  bbox_pred 1601 x 4 class-specific deltas used raw (BBOX_REG_WEIGHTS 1, 1, 1, 1: the Caffe snapshot stores them
  un-normalised), attributes: embedding (1601 -> 256) of the argmax of cls_score (background included) concatenated
  to pool5, fc 512 + ReLU, 401 logits, softmax.
- Boxes use the Caffe "+1" convention: width = x2 - x1 + 1 when decoding, filtering and in NMS overlaps; boxes are
  clipped to [0, w - 1] x [0, h - 1].

Extraction (`tools/generate_tsv.py:get_detections_from_im`, MILVLG `utils/extract_utils.py:save_roi_features`):
for each class c >= 1, NMS 0.3 over all proposals with score p_c; a proposal's confidence is the highest p_c among
the classes whose NMS kept it; keep the proposals with confidence >= 0.2 (in proposal order), or the top
`min_regions` by confidence when fewer pass, or the top `max_regions` when more pass (10 and 100; the "fixed 36"
features use 36 and 36). The saved boxes are the RPN proposals (not the class-regressed boxes: "Keep the original
boxes, don't worry about the regression bbox outputs") divided by the resize factor, and the features are pool5 of
those proposals; `box_source="regressed"` gives MILVLG's `save_bbox` variant instead (each proposal's box regressed
for its best class, clipped to the image, with the same features of the proposal). Labels are argmax over the 1600
object classes (background excluded) and attributes argmax over the 400 attributes ("no attribute" excluded), as
the released scripts save `objects_id` and `attrs_id`: 0-based indices into objects_vocab.txt and
attributes_vocab.txt, which are data and not part of the model (see `label_names`).

Under autocast (bf16 / fp16) only the convolutions and linear layers run in low precision: the anchors, box
decoding, clipping, NMS, RoI pooling, the softmaxes and the selection run in float32.
Batches of images of different sizes are zero-padded; the padded area is masked to zero before every spatial
operation and each image's RPN reads only its own area, so a batch gives what each image gives alone.
The module is inference only: there are no training losses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.ops import nms, roi_pool

from vltools.vision.bottom_up import TEST_MAX_SIZE, TEST_SCALE, prepare_images

BOX_DELTA_CLAMP = math.log(1000.0 / 16)  # detectron2's limit on dw, dh (exp overflow guard; Caffe has none)
FEATURE_STRIDE = 16  # stem 4 x res3 2 x res4 2


def caffe_anchors(base_size: int, ratios: Sequence[float], scales: Sequence[float]) -> torch.Tensor:
    """The cell anchors of Faster R-CNN's `generate_anchors` (x1, y1, x2, y2 around the (0, 0, base-1, base-1)
    window), ratios outer and scales inner, widths and heights rounded as Caffe does (half to even)."""
    size = float(base_size * base_size)
    centre = 0.5 * (base_size - 1)
    anchors = []
    for ratio in ratios:
        ratio_w = float(round(math.sqrt(size / ratio)))
        ratio_h = float(round(ratio_w * ratio))
        for scale in scales:
            w, h = ratio_w * scale, ratio_h * scale
            anchors.append([centre - 0.5 * (w - 1), centre - 0.5 * (h - 1), centre + 0.5 * (w - 1),
                            centre + 0.5 * (h - 1)])
    return torch.tensor(anchors, dtype=torch.float32)


def decode_boxes(boxes: torch.Tensor, deltas: torch.Tensor, weights: Sequence[float] = (1.0, 1.0, 1.0, 1.0),
                 clamp: float = BOX_DELTA_CLAMP) -> torch.Tensor:
    """Apply (N, 4k) deltas (dx, dy, dw, dh per class) to (N, 4) boxes the Caffe way (`bbox_transform_inv`):
    width = x2 - x1 + 1, centre = x1 + width / 2, new box = centre' -/+ width' / 2; dw and dh are capped at
    `clamp` as in detectron2."""
    boxes = boxes.to(deltas.dtype)
    widths = boxes[:, 2] - boxes[:, 0] + 1.0
    heights = boxes[:, 3] - boxes[:, 1] + 1.0
    centre_x = boxes[:, 0] + 0.5 * widths
    centre_y = boxes[:, 1] + 0.5 * heights
    wx, wy, ww, wh = weights
    dx, dy = deltas[:, 0::4] / wx, deltas[:, 1::4] / wy
    dw, dh = (deltas[:, 2::4] / ww).clamp(max=clamp), (deltas[:, 3::4] / wh).clamp(max=clamp)
    new_x = dx * widths[:, None] + centre_x[:, None]
    new_y = dy * heights[:, None] + centre_y[:, None]
    new_w = torch.exp(dw) * widths[:, None]
    new_h = torch.exp(dh) * heights[:, None]
    decoded = torch.empty_like(deltas)
    decoded[:, 0::4] = new_x - 0.5 * new_w
    decoded[:, 1::4] = new_y - 0.5 * new_h
    decoded[:, 2::4] = new_x + 0.5 * new_w
    decoded[:, 3::4] = new_y + 0.5 * new_h
    return decoded


def clip_boxes(boxes: torch.Tensor, image_size: tuple[float, float]) -> torch.Tensor:
    """(N, 4k) boxes clipped to an image of (h, w): x into [0, w - 1], y into [0, h - 1] (Caffe `clip_boxes`)."""
    height, width = image_size
    clipped = boxes.clone()
    clipped[:, 0::2] = clipped[:, 0::2].clamp(min=0.0, max=float(width) - 1.0)
    clipped[:, 1::2] = clipped[:, 1::2].clamp(min=0.0, max=float(height) - 1.0)
    return clipped


def legacy_box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(N, M) overlaps of x1 y1 x2 y2 boxes with the "+1" areas of the Caffe and maskrcnn-benchmark NMS."""
    area_a = (a[:, 2] - a[:, 0] + 1.0) * (a[:, 3] - a[:, 1] + 1.0)
    area_b = (b[:, 2] - b[:, 0] + 1.0) * (b[:, 3] - b[:, 1] + 1.0)
    top_left = torch.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    sides = (bottom_right - top_left + 1.0).clamp(min=0.0)
    inter = sides[..., 0] * sides[..., 1]
    return inter / (area_a[:, None] + area_b[None, :] - inter)


def legacy_nms(boxes: torch.Tensor, scores: torch.Tensor, threshold: float) -> torch.Tensor:
    """Indices kept by the Caffe / maskrcnn-benchmark NMS ("+1" overlaps; a box suppresses the later boxes that
    overlap it by >= `threshold`), best first. torchvision's kernel does the work: its overlap of the boxes grown
    by one pixel at the bottom right is the "+1" overlap, and "> the double just below threshold" is ">=" for it."""
    grown = boxes.float().clone()
    grown[:, 2:] += 1.0
    return nms(grown, scores.float(), math.nextafter(threshold, -math.inf))


def classwise_max_confidence(boxes: torch.Tensor, class_scores: torch.Tensor, threshold: float,
                             method: str = "auto") -> torch.Tensor:
    """The released `max_conf`: for every class but background (column 0), greedy NMS over all boxes by that class's
    score ("+1" overlaps, `threshold`); each box gets the highest score among the classes whose NMS kept it, or 0.
    (R, 4), (R, C) -> (R,).

    `method` "loop" runs one NMS per class (fast on a CPU); "vectorized" runs every class at once, walking the
    ranks, at each rank every class's box there suppressing what it overlaps further down (fast on a GPU, where
    1600 separate NMS calls would each wait for the device); "auto" picks by the device of `class_scores`.
    """
    count = boxes.shape[0]
    if count == 0:
        return class_scores.new_zeros(0)
    if method == "auto":
        method = "loop" if class_scores.device.type == "cpu" else "vectorized"
    if method == "loop":
        confidence = class_scores.new_zeros(count)
        for column in range(1, class_scores.shape[1]):
            scores = class_scores[:, column]
            kept = legacy_nms(boxes, scores, threshold)
            confidence[kept] = torch.maximum(confidence[kept], scores[kept])
        return confidence
    if method != "vectorized":
        raise ValueError(f"method must be 'auto', 'loop' or 'vectorized', not {method!r}")
    scores = class_scores[:, 1:].t()  # (C - 1, R)
    overlaps = legacy_box_iou(boxes.float(), boxes.float()) >= threshold
    order = torch.argsort(scores, dim=1, descending=True, stable=True)
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(count, device=order.device).expand_as(order).contiguous())
    keep = torch.ones_like(scores, dtype=torch.bool)
    for position in range(count):
        current = order[:, position]
        alive = keep.gather(1, current[:, None])
        keep &= ~(overlaps[current] & (rank > position) & alive)
    return torch.where(keep, scores, torch.zeros_like(scores)).max(dim=0).values


def select_indices(confidence: torch.Tensor, min_regions: int, max_regions: int,
                   score_threshold: float) -> torch.Tensor:
    """The released choice of boxes: those with confidence >= threshold in their original order; if fewer than
    `min_regions`, the `min_regions` most confident; if more than `max_regions`, the `max_regions` most confident
    (most confident first in those two cases)."""
    passing = torch.nonzero(confidence >= score_threshold).flatten()
    ranked = torch.argsort(confidence, descending=True, stable=True)
    if len(passing) < min_regions:
        return ranked[:min_regions]
    if len(passing) > max_regions:
        return ranked[:max_regions]
    return passing


class FrozenBatchNorm(nn.Module):
    """Batch norm with fixed statistics and affine (detectron2's FrozenBatchNorm2d; Caffe BatchNorm + Scale)."""

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.register_buffer("weight", torch.ones(channels))
        self.register_buffer("bias", torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """y = (x - mean) / sqrt(var + eps) * weight + bias, per channel."""
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, training=False,
                            eps=self.eps)


class ConvNorm(nn.Conv2d):
    """A bias-free convolution followed by a frozen batch norm (`conv.weight`, `conv.norm.*`, detectron2's layout)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                 dilation: int = 1, eps: float = 1e-5) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding, dilation=dilation,
                         bias=False)
        self.norm = FrozenBatchNorm(out_channels, eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Convolution, then the frozen batch norm."""
        return self.norm(super().forward(x))


class Bottleneck(nn.Module):
    """ResNet v1 bottleneck with the stride in the first 1x1 conv (MSRA / Caffe) and a projection shortcut when the
    channels change."""

    def __init__(self, in_channels: int, bottleneck_channels: int, out_channels: int, stride: int = 1,
                 dilation: int = 1, eps: float = 1e-5) -> None:
        super().__init__()
        self.shortcut = ConvNorm(in_channels, out_channels, 1, stride, eps=eps) if in_channels != out_channels else None
        self.conv1 = ConvNorm(in_channels, bottleneck_channels, 1, stride, eps=eps)
        self.conv2 = ConvNorm(bottleneck_channels, bottleneck_channels, 3, 1, padding=dilation, dilation=dilation,
                              eps=eps)
        self.conv3 = ConvNorm(bottleneck_channels, out_channels, 1, eps=eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """`mask` (B, 1, h, w) zeroes the padding of each image before the 3x3 conv (None: nothing padded)."""
        out = F.relu(self.conv1(x))
        if mask is not None:
            out = out * mask
        out = self.conv3(F.relu(self.conv2(out)))
        return F.relu(out + (x if self.shortcut is None else self.shortcut(x)))


class Stem(nn.Module):
    """conv 7x7/2 + frozen BN + ReLU, then max-pool 3x3/2 without padding, rounding up (Caffe's pool1)."""

    def __init__(self, out_channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.conv1 = ConvNorm(3, out_channels, 7, 2, padding=3, eps=eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """`mask` zeroes each image's padding before the max-pool (the ReLU output is >= 0 inside)."""
        x = F.relu(self.conv1(x))
        if mask is not None:
            x = x * mask
        return F.max_pool2d(x, kernel_size=3, stride=2, padding=0, ceil_mode=True)


def _conv_size(size: int, kernel: int, stride: int, padding: int, ceil: bool = False) -> int:
    span = size + 2 * padding - kernel
    return (-(-span // stride) if ceil else span // stride) + 1


def _valid_mask(sizes: Sequence[tuple[int, int]], height: int, width: int, like: torch.Tensor) -> torch.Tensor | None:
    """(B, 1, H, W) ones on each image's own area and zeros on its padding; None when no image is padded."""
    if all(h == height and w == width for h, w in sizes):
        return None
    rows = torch.arange(height, device=like.device)[None, :, None]
    cols = torch.arange(width, device=like.device)[None, None, :]
    heights = torch.tensor([h for h, _ in sizes], device=like.device)[:, None, None]
    widths = torch.tensor([w for _, w in sizes], device=like.device)[:, None, None]
    return ((rows < heights) & (cols < widths)).unsqueeze(1).to(like.dtype)


class ResNetC4(nn.Module):
    """Stem and res2..res4 (stride 16); `blocks` per stage, channels doubling from `res2_channels`."""

    def __init__(self, stem_channels: int, res2_channels: int, bottleneck_channels: int, blocks: Sequence[int],
                 eps: float) -> None:
        super().__init__()
        self.stem = Stem(stem_channels, eps)
        in_channels, out_channels, inner = stem_channels, res2_channels, bottleneck_channels
        self.stage_names = ("res2", "res3", "res4")
        for index, (name, count) in enumerate(zip(self.stage_names, blocks, strict=True)):
            stride = 1 if index == 0 else 2
            stage = [Bottleneck(in_channels if b == 0 else out_channels, inner, out_channels, stride if b == 0 else 1,
                                eps=eps) for b in range(count)]
            self.add_module(name, nn.ModuleList(stage))
            in_channels, out_channels, inner = out_channels, out_channels * 2, inner * 2
        self.out_channels = in_channels

    def forward(self, x: torch.Tensor, sizes: Sequence[tuple[int, int]]
                ) -> tuple[torch.Tensor, list[tuple[int, int]]]:
        """(B, 3, H, W) padded batch and each image's (h, w) -> res4 (zero outside each image) and its sizes."""
        sizes = [(_conv_size(h, 7, 2, 3), _conv_size(w, 7, 2, 3)) for h, w in sizes]
        height, width = _conv_size(x.shape[2], 7, 2, 3), _conv_size(x.shape[3], 7, 2, 3)
        x = self.stem(x, _valid_mask(sizes, height, width, x))
        sizes = [(_conv_size(h, 3, 2, 0, ceil=True), _conv_size(w, 3, 2, 0, ceil=True)) for h, w in sizes]
        for index, name in enumerate(self.stage_names):
            if index > 0:  # res3a and res4a: stride 2 in the first 1x1 conv and the shortcut
                sizes = [(_conv_size(h, 1, 2, 0), _conv_size(w, 1, 2, 0)) for h, w in sizes]
                height, width = _conv_size(x.shape[2], 1, 2, 0), _conv_size(x.shape[3], 1, 2, 0)
            else:
                height, width = x.shape[2], x.shape[3]
            mask = _valid_mask(sizes, height, width, x)
            for block in getattr(self, name):
                x = block(x, mask)
        mask = _valid_mask(sizes, x.shape[2], x.shape[3], x)
        return (x if mask is None else x * mask), sizes


class RPNHead(nn.Module):
    """3x3 conv + ReLU, objectness (A background then A foreground logits) and anchor deltas (4 per anchor);
    `cell_anchors` (A, 4) are saved with the weights, as detectron2 checkpoints carry them."""

    def __init__(self, in_channels: int, channels: int, anchors: torch.Tensor) -> None:
        super().__init__()
        count = anchors.shape[0]
        self.conv = nn.Conv2d(in_channels, channels, 3, padding=1)
        self.objectness = nn.Conv2d(channels, 2 * count, 1)
        self.deltas = nn.Conv2d(channels, 4 * count, 1)
        self.register_buffer("cell_anchors", anchors.clone())

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, C, h, w) -> objectness (B, 2A, h, w) and deltas (B, 4A, h, w)."""
        hidden = F.relu(self.conv(x))
        return self.objectness(hidden), self.deltas(hidden)


class Predictor(nn.Module):
    """Class scores, class-specific box deltas and the attribute branch (class embedding of the argmax class,
    concatenated to the pooled feature, fc + ReLU, attribute logits)."""

    def __init__(self, dim: int, num_classes: int, num_attributes: int, embedding: int, hidden: int) -> None:
        super().__init__()
        self.cls_score = nn.Linear(dim, num_classes)
        self.bbox_pred = nn.Linear(dim, 4 * num_classes)
        self.cls_embed = nn.Embedding(num_classes, embedding)
        self.attr_fc = nn.Linear(dim + embedding, hidden)
        self.attr_score = nn.Linear(hidden, num_attributes)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(R, D) -> class probabilities (R, C), box deltas (R, 4C), attribute probabilities (R, A), all float32:
        under autocast the linear layers run in low precision and their outputs are widened before the softmax."""
        logits = self.cls_score(x).float()
        deltas = self.bbox_pred(x).float()
        embedded = self.cls_embed(logits.argmax(dim=1))
        hidden = F.relu(self.attr_fc(torch.cat([x, embedded], dim=1)))
        return logits.softmax(dim=1), deltas, self.attr_score(hidden).float().softmax(dim=1)


@dataclass
class Detections:
    """Everything the detector computes for one image's proposals, before the released selection.

    proposals (R, 4) in original-image pixels; class_probs (R, C) with background in column 0; box_deltas (R, 4C);
    attribute_probs (R, A) with "no attribute" in column 0; features (R, D) pooled res5; image_size (h, w) of the
    original image; scale the resize factor.
    """

    proposals: torch.Tensor
    class_probs: torch.Tensor
    box_deltas: torch.Tensor
    attribute_probs: torch.Tensor
    features: torch.Tensor
    image_size: tuple[int, int]
    scale: float

    def regressed_boxes(self) -> torch.Tensor:
        """(R, 4C) class-specific boxes: the deltas applied to the proposals, clipped to the original image."""
        return clip_boxes(decode_boxes(self.proposals, self.box_deltas), self.image_size)


@dataclass
class BottomUpRegions:
    """The selected regions of one image: boxes (K, 4) x1 y1 x2 y2 in original-image pixels, features (K, D),
    labels (K,) 0-based object indices (background excluded) with label_scores, attributes (K,) 0-based attribute
    indices ("no attribute" excluded) with attribute_scores, scores (K,) the class-wise-NMS confidence the
    selection used, and the original image_size (h, w)."""

    boxes: torch.Tensor
    features: torch.Tensor
    labels: torch.Tensor
    label_scores: torch.Tensor
    attributes: torch.Tensor
    attribute_scores: torch.Tensor
    scores: torch.Tensor
    image_size: tuple[int, int]


def select_regions(detections: Detections, num_regions: int | None = None, min_regions: int = 10,
                   max_regions: int = 100, score_threshold: float = 0.2, class_nms: float = 0.3,
                   box_source: str = "proposals") -> BottomUpRegions:
    """The released extraction on one image's detections: class-wise NMS confidence over `box_source` boxes
    ("proposals", as released, or "regressed"), then `select_indices` with (num_regions, num_regions) when
    `num_regions` is given (the fixed-36 features) or (min_regions, max_regions)."""
    if box_source not in ("proposals", "regressed"):
        raise ValueError(f"box_source must be 'proposals' or 'regressed', not {box_source!r}")
    if num_regions is not None:
        min_regions = max_regions = num_regions
    if min_regions < 0 or max_regions < min_regions:
        raise ValueError(f"need 0 <= min_regions <= max_regions, not {min_regions} and {max_regions}")
    probs = detections.class_probs
    boxes = detections.proposals
    if box_source == "regressed" and len(boxes):
        best = probs[:, 1:].argmax(dim=1) + 1
        columns = (best[:, None] * 4 + torch.arange(4, device=best.device)[None, :])
        boxes = detections.regressed_boxes().gather(1, columns)
    confidence = classwise_max_confidence(boxes, probs, class_nms)
    keep = select_indices(confidence, min_regions, max_regions, score_threshold)
    label_scores, labels = probs[keep, 1:].max(dim=1)
    attribute_scores, attributes = detections.attribute_probs[keep, 1:].max(dim=1)
    return BottomUpRegions(boxes=boxes[keep].float(), features=detections.features[keep], labels=labels,
                           label_scores=label_scores, attributes=attributes, attribute_scores=attribute_scores,
                           scores=confidence[keep], image_size=detections.image_size)


def label_names(regions: BottomUpRegions, objects: Sequence[str], attributes: Sequence[str],
                num_objects: int = 1600, num_attributes: int = 400) -> tuple[list[str], list[str]]:
    """Names of each region's object and attribute from vocabularies given as plain lists (the first name of each
    line of the released objects_vocab.txt and attributes_vocab.txt): `num_objects` and `num_attributes` names,
    or one more each when the list starts with the background / "no attribute" name."""
    def lookup(indices: torch.Tensor, names: Sequence[str], size: int) -> list[str]:
        if len(names) not in (size, size + 1):
            raise ValueError(f"a vocabulary of {len(names)} names; expected {size} (or {size + 1} with the "
                             "background name first)")
        offset = len(names) - size
        return [names[int(i) + offset] for i in indices]

    return lookup(regions.labels, objects, num_objects), lookup(regions.attributes, attributes, num_attributes)


class BottomUpAttention(nn.Module):
    """Faster R-CNN ResNet-101 C4 with attributes, as released with the bottom-up-attention features.

    Inference only. `forward(images, ...)` takes images (3, H, W) with values 0..255 in their original size and
    returns the selected regions of each (`BottomUpRegions`); `detect` returns every proposal (`Detections`).
    The settings default to the released model; smaller values build a small model with the same state-dict keys.
    `vocab_size` is unused (it is there for the model registry's common signature).
    """

    DEFAULTS: dict = {
        "stem_channels": 64, "res2_channels": 256, "bottleneck_channels": 64, "blocks": [3, 4, 23],
        "res5_blocks": 3, "res5_stride": 1, "res5_dilation": 2, "bn_eps": 1e-5,
        "rpn_channels": 512, "anchor_base": 16, "anchor_ratios": [0.5, 1.0, 2.0], "anchor_scales": [4, 8, 16, 32],
        "rpn_pre_nms": 6000, "rpn_post_nms": 300, "rpn_nms": 0.7, "rpn_min_size": 16,
        "pool_size": 14, "num_classes": 1601, "num_attributes": 401, "class_embedding": 256,
        "attribute_hidden": 512, "class_nms": 0.3, "test_scale": TEST_SCALE, "test_max_size": TEST_MAX_SIZE,
    }

    def __init__(self, vocab_size: int = 0, **settings: object) -> None:
        super().__init__()
        unknown = sorted(set(settings) - set(self.DEFAULTS))
        if unknown:
            raise ValueError(f"bottom-up has no setting {', '.join(unknown)}")
        config = {**self.DEFAULTS, **settings}
        self.config = config
        eps = float(config["bn_eps"])
        self.backbone = ResNetC4(int(config["stem_channels"]), int(config["res2_channels"]),
                                 int(config["bottleneck_channels"]), [int(b) for b in config["blocks"]], eps)
        res4 = self.backbone.out_channels
        anchors = caffe_anchors(int(config["anchor_base"]), config["anchor_ratios"], config["anchor_scales"])
        self.rpn = RPNHead(res4, int(config["rpn_channels"]), anchors)
        dim, inner = 2 * res4, int(config["bottleneck_channels"]) * 8
        self.res5 = nn.ModuleList([
            Bottleneck(res4 if b == 0 else dim, inner, dim, int(config["res5_stride"]) if b == 0 else 1,
                       dilation=int(config["res5_dilation"]), eps=eps)
            for b in range(int(config["res5_blocks"]))])
        self.dim = dim
        self.predictor = Predictor(dim, int(config["num_classes"]), int(config["num_attributes"]),
                                   int(config["class_embedding"]), int(config["attribute_hidden"]))

    def _proposals(self, objectness: torch.Tensor, deltas: torch.Tensor, size: tuple[int, int],
                   scale: float) -> torch.Tensor:
        """One image's RPN output (2A, h, w), (4A, h, w) -> proposals (R, 4) in resized-image pixels, best first,
        computed in float32 (the caller turns autocast off)."""
        config = self.config
        objectness, deltas = objectness.float(), deltas.float()
        anchors = self.rpn.cell_anchors.float()
        count, (height, width) = anchors.shape[0], objectness.shape[1:]
        scores = torch.sigmoid(objectness[count:] - objectness[:count])  # softmax over (background, object)
        scores = scores.permute(1, 2, 0).reshape(-1)
        deltas = deltas.view(count, 4, height, width).permute(2, 3, 0, 1).reshape(-1, 4)
        ys = torch.arange(height, device=deltas.device, dtype=deltas.dtype) * FEATURE_STRIDE
        xs = torch.arange(width, device=deltas.device, dtype=deltas.dtype) * FEATURE_STRIDE
        grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
        shifts = torch.stack([grid_x, grid_y, grid_x, grid_y], dim=-1).reshape(-1, 1, 4)
        boxes = clip_boxes(decode_boxes((shifts + anchors[None]).reshape(-1, 4), deltas), size)
        min_size = float(config["rpn_min_size"]) * scale
        large = ((boxes[:, 2] - boxes[:, 0] + 1.0) >= min_size) & ((boxes[:, 3] - boxes[:, 1] + 1.0) >= min_size)
        boxes, scores = boxes[large], scores[large]
        order = torch.argsort(scores, descending=True, stable=True)[:int(config["rpn_pre_nms"])]
        boxes, scores = boxes[order], scores[order]
        keep = legacy_nms(boxes, scores, float(config["rpn_nms"]))[:int(config["rpn_post_nms"])]
        return boxes[keep]

    @torch.no_grad()
    def detect(self, images: Sequence[torch.Tensor], channel_order: str = "rgb") -> list[Detections]:
        """Every proposal of each image with its class, box and attribute predictions and pooled feature."""
        device = next(self.parameters()).device
        batch, sizes, scales = prepare_images([image.to(device) for image in images], channel_order,
                                              int(self.config["test_scale"]), int(self.config["test_max_size"]))
        features, feature_sizes = self.backbone(batch, sizes)
        objectness, deltas = self.rpn(features)
        # Only the convolutions and linear layers follow the caller's autocast: the box arithmetic (anchors,
        # decoding, clipping, NMS, ranking) runs in float32, where bf16's 8-bit mantissa would move boxes by pixels
        # and reorder close scores. RoI pooling too reads float32 boxes (torchvision has no CPU bf16 kernel); it
        # takes a max, so its output goes back to the features' dtype exactly.
        with torch.autocast(device.type, enabled=False):
            proposals = [self._proposals(objectness[i, :, :h, :w], deltas[i, :, :h, :w], sizes[i], scales[i])
                         for i, (h, w) in enumerate(feature_sizes)]
            size = int(self.config["pool_size"])
            x = roi_pool(features.float(), proposals, output_size=(size, size),
                         spatial_scale=1.0 / FEATURE_STRIDE).to(features.dtype)
        for block in self.res5:
            x = block(x)
        pooled = x.mean(dim=(2, 3))
        class_probs, box_deltas, attribute_probs = self.predictor(pooled)
        pooled = pooled.float()
        counts = [len(p) for p in proposals]
        results = []
        for index, parts in enumerate(zip(class_probs.split(counts), box_deltas.split(counts),
                                          attribute_probs.split(counts), pooled.split(counts), strict=True)):
            image = images[index]
            results.append(Detections(proposals[index] / scales[index], *parts,
                                      image_size=(int(image.shape[1]), int(image.shape[2])), scale=scales[index]))
        return results

    @torch.no_grad()
    def forward(self, images: Sequence[torch.Tensor], num_regions: int | None = None, min_regions: int = 10,
                max_regions: int = 100, score_threshold: float = 0.2, box_source: str = "proposals",
                channel_order: str = "rgb") -> list[BottomUpRegions]:
        """The released features of each image: `num_regions` boxes (the fixed-36 mode) or between `min_regions`
        and `max_regions` with confidence >= `score_threshold` (the adaptive 10-100 mode); see `select_regions`."""
        detections = self.detect(images, channel_order)
        with torch.autocast(next(self.parameters()).device.type, enabled=False):  # the selection in float32
            return [select_regions(d, num_regions, min_regions, max_regions, score_threshold,
                                   float(self.config["class_nms"]), box_source) for d in detections]

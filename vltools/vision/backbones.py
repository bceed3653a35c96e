"""Torchvision backbones cut at their last convolutional stage, and resolution of `--weights`.

`imagenet` weights come through torchvision's weight API and the torch hub cache; with no network and
no cached file the error says, in one sentence, which file to put in which folder. Nothing here hangs:
downloads run under a socket timeout.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch
import torchvision
from torch import nn
from torchvision.models import WeightsEnum

from vltools.errors import VLToolsError, first_line
from vltools.io.checkpoints import CHECKPOINT_FORMAT, load_checkpoint, load_weights_only

DOWNLOAD_TIMEOUT_S = 30
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
HEADS = ("fc.", "classifier.")  # the classification layers after the last stage, which no trunk uses


@dataclass(frozen=True)
class BackboneSpec:
    """How to build one torchvision model and where its last stage is."""

    builder: str
    weights: dict[str, str]  # --weights keyword -> torchvision enum, e.g. "ResNet101_Weights.IMAGENET1K_V1"
    stride: int
    dim: int


BACKBONES = {
    "resnet18": BackboneSpec("resnet18", {"imagenet": "ResNet18_Weights.IMAGENET1K_V1"}, 32, 512),
    "resnet50": BackboneSpec("resnet50", {"imagenet": "ResNet50_Weights.IMAGENET1K_V1",
                                          "imagenet-v2": "ResNet50_Weights.IMAGENET1K_V2"}, 32, 2048),
    "resnet101": BackboneSpec("resnet101", {"imagenet": "ResNet101_Weights.IMAGENET1K_V1",
                                            "imagenet-v2": "ResNet101_Weights.IMAGENET1K_V2"}, 32, 2048),
    "resnet152": BackboneSpec("resnet152", {"imagenet": "ResNet152_Weights.IMAGENET1K_V1",
                                            "imagenet-v2": "ResNet152_Weights.IMAGENET1K_V2"}, 32, 2048),
    "vgg19": BackboneSpec("vgg19", {"imagenet": "VGG19_Weights.IMAGENET1K_V1"}, 16, 512),
}


def weights_enum(qualified: str) -> WeightsEnum:
    """`"ResNet101_Weights.IMAGENET1K_V1"` -> the torchvision enum member."""
    return torchvision.models.get_weight(qualified)


def _download(url: str, destination: Path, hash_prefix: str | None) -> None:
    """Fetch `url` into `destination` (a seam for tests; raises on any network failure)."""
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    try:
        torch.hub.download_url_to_file(url, str(destination), hash_prefix=hash_prefix, progress=False)
    finally:
        socket.setdefaulttimeout(previous)


def _cached_file(weights: WeightsEnum) -> tuple[str, Path]:
    """The URL of torchvision `weights` and its file in the torch hub cache."""
    return weights.url, Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(weights.url).path)


def fetch_pretrained(qualified: Sequence[str]) -> None:
    """Put the files of torchvision weights (`"ResNet101_Weights.IMAGENET1K_V1"`, ...) in the torch hub cache,
    downloading those that are not there. A stage needing several (a backbone and a detector) calls it with all of
    them before building anything, so that offline one sentence names every missing file and its URL."""
    missing: list[tuple[str, str, str]] = []
    folder = Path(torch.hub.get_dir()) / "checkpoints"
    for name in dict.fromkeys(qualified):
        url, cached = _cached_file(weights_enum(name))
        if cached.exists():
            continue
        match = re.search(r"-([a-f0-9]+)\.", cached.name)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            _download(url, cached, match.group(1) if match else None)
        except Exception as exc:  # noqa: BLE001 - any failure means the same advice
            missing.append((cached.name, url, first_line(exc)))
    if missing:
        files = " and ".join(f"{name} from {url}" for name, url, _ in missing)
        several = len(missing) > 1
        raise VLToolsError(
            f"cannot download the pretrained weights file{'s' if several else ''} {files} ({missing[0][2]}); "
            f"download {'them' if several else 'it'} on a machine with network and put {'them' if several else 'it'} "
            f"in {folder}/ (the torch hub cache, set by TORCH_HOME)")


def pretrained_state_dict(weights: WeightsEnum) -> dict[str, torch.Tensor]:
    """The state dict of torchvision `weights`, from the torch hub cache or downloaded into it.

    Offline and not cached: a one-sentence VLToolsError naming the file, its URL and the cache folder.
    """
    fetch_pretrained([f"{type(weights).__name__}.{weights.name}"])
    return torch.load(_cached_file(weights)[1], map_location="cpu", weights_only=True)


def pretrained_name(name: str, weights: str) -> str | None:
    """The torchvision weights that `--weights` names for backbone `name` (e.g. "ResNet101_Weights.IMAGENET1K_V1"),
    None for `none`, a file or an unknown backbone (which `build_backbone` reports)."""
    spec = BACKBONES.get(name)
    return spec.weights.get(weights) if spec is not None else None


def load_weights_file(path: Path) -> dict[str, torch.Tensor]:
    """A torchvision-layout state dict file, or the state dict inside a vltools checkpoint."""
    payload = load_weights_only(
        path, "state dict", "no such weights file; give --weights imagenet, none or an existing file",
        "empty file, not a state dict; give a torchvision state dict or a vltools checkpoint",
        "give a torchvision state dict saved with torch.save(model.state_dict()) or a vltools checkpoint")
    if isinstance(payload, dict) and payload.get("format") == CHECKPOINT_FORMAT:
        payload = load_checkpoint(path)["state_dict"]  # verified against its digest
    if not isinstance(payload, dict) or not all(isinstance(v, torch.Tensor) for v in payload.values()):
        raise VLToolsError(f"{path}: not a state dict (a dict of tensors); give a torchvision state dict or a "
                           "vltools checkpoint")
    return payload


def _strip_prefix(state: dict[str, torch.Tensor], model_keys: list[str]) -> dict[str, torch.Tensor]:
    """Keys of a checkpoint that wraps the model (e.g. `backbone.conv1.weight`) mapped to the model's keys."""
    first = model_keys[0]
    for key in state:
        if key.endswith(first):
            prefix = key[: len(key) - len(first)]
            return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    return state


def load_into(model: nn.Module, state: dict[str, torch.Tensor], source: str, optional: tuple[str, ...] = ()) -> None:
    """Load `state` into `model`; every parameter must be present except those under `optional` prefixes."""
    state = _strip_prefix(state, list(model.state_dict()))
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith(optional)]
    if missing:
        raise VLToolsError(f"{source}: weights do not fit this model: missing {len(missing)} tensors "
                           f"(first {missing[0]!r}); check --backbone or the weights file")
    shapes = {k: v.shape for k, v in model.state_dict().items()}
    for key, value in state.items():
        if key in shapes and shapes[key] != value.shape:
            raise VLToolsError(f"{source}: tensor {key!r} has shape {tuple(value.shape)}, the model needs "
                               f"{tuple(shapes[key])}; check --backbone or the weights file")


def describe_weights(weights: str, qualified: str | None) -> str:
    """What to record in the `weights` attribute: the torchvision enum, `none`, or file name + sha256 prefix."""
    if weights == "none":
        return "none"
    if qualified is not None:
        return f"{weights} ({qualified})"
    digest = hashlib.sha256(Path(weights).read_bytes()).hexdigest()[:16]
    return f"{Path(weights).name} (sha256 {digest})"


class Backbone(nn.Module):
    """A classification network cut after its last convolutional stage: (B, 3, H, W) -> (B, D, H/s, W/s)."""

    def __init__(self, trunk: nn.Module, stride: int, dim: int) -> None:
        super().__init__()
        self.trunk = trunk
        self.stride = stride
        self.dim = dim

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.trunk(images)


def build_backbone(name: str, weights: str = "imagenet") -> tuple[Backbone, str]:
    """The backbone `name` with `weights` (`imagenet`, `imagenet-v2`, `none` or a file path), in eval mode,
    and the description of the weights to record."""
    if name not in BACKBONES:
        raise VLToolsError(f"unknown backbone {name!r}; use one of {', '.join(BACKBONES)}")
    spec = BACKBONES[name]
    model = getattr(torchvision.models, spec.builder)(weights=None)
    qualified = None
    if weights in spec.weights:
        qualified = spec.weights[weights]
        load_into(model, pretrained_state_dict(weights_enum(qualified)), qualified)
    elif weights.startswith("imagenet") and not Path(weights).exists():
        raise VLToolsError(f"--weights {weights}: not available for {name}; use one of "
                           f"{', '.join([*spec.weights, 'none', 'PATH'])}")
    elif weights != "none":
        load_into(model, load_weights_file(Path(weights)), weights, optional=HEADS)
    return Backbone(cut_trunk(name, model), spec.stride, spec.dim).eval(), describe_weights(weights, qualified)


def cut_trunk(name: str, model: nn.Module) -> nn.Sequential:
    """The layers of torchvision `model` (backbone `name`) up to its last convolutional stage, sharing its modules."""
    if name.startswith("vgg"):
        return nn.Sequential(*list(model.features.children())[:-1])
    return nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool,
                         model.layer1, model.layer2, model.layer3, model.layer4)


def trunk_state_dict(name: str, trunk: nn.Module) -> dict[str, torch.Tensor]:
    """The weights of `trunk` (a backbone `name` trunk, e.g. a trained one) as a torchvision state dict without the
    classification head, the file `--weights PATH` loads (and torchvision's model with strict=False)."""
    model = getattr(torchvision.models, BACKBONES[name].builder)(weights=None)
    cut_trunk(name, model).load_state_dict(trunk.state_dict())
    return {key: value for key, value in model.state_dict().items() if not key.startswith(HEADS)}


def check_image_size(name: str, size: int, setting: str) -> None:
    """Refuse training images smaller than backbone `name`'s stride: every layer would run on padding and the
    feature map would be one cell whatever the image, so the model would learn from nothing."""
    stride = BACKBONES[name].stride
    if size < stride:
        raise VLToolsError(f"{setting}={size} is smaller than the {stride}-pixel stride of backbone {name}, so its "
                           f"feature map would hold nothing of the image; set {setting} to at least {stride}")


def normalize(images: torch.Tensor) -> torch.Tensor:
    """uint8 (B, 3, H, W) in [0, 255] -> float, ImageNet-normalised."""
    mean = torch.tensor(IMAGENET_MEAN, device=images.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=images.device).view(1, 3, 1, 1)
    return (images.float() / 255.0 - mean) / std

"""CLIP (model `clip`): an OpenCLIP model as a vltools model, trained by `vltools train --model clip` with its own
contrastive loss (vltools.training.tasks.clip).

The network is open_clip's, built by the open_clip package itself (`open_clip.create_model`, never copied): the
architecture `arch` (any of `open_clip.list_models()`), whose configuration `overrides` may replace key by key with
open_clip's own model-config keys (`embed_dim`, `vision_cfg`, `text_cfg`, `quick_gelu`...: a small CLIP for the
synthetic world is `arch: ViT-B-32` with a few-layer `vision_cfg` and `text_cfg`), and `preprocess` the
preprocessing settings (open_clip's `preprocess_cfg`: size, mean, std, interpolation, resize_mode) that differ from
the architecture's, as released weights record them. The module holds open_clip's model as `clip`; `forward` gives
what open_clip's training loop gives its ClipLoss: l2-normalised image and text features and the learned
temperature exp(logit_scale).
"""

from __future__ import annotations

import torch
from torch import nn

from vltools.errors import VLToolsError, first_line
from vltools.vision.openclip import open_clip_package, random_init_quiet


class Clip(nn.Module):
    """open_clip's model of `arch` with `overrides` (model-config keys) and `preprocess` (preprocessing settings),
    randomly initialised from torch's global generator; weights come from a checkpoint or `task.init`."""

    DEFAULTS = {"arch": "ViT-B-32", "overrides": {}, "preprocess": {}}
    separable = True

    def __init__(self, vocab_size: int = 0, arch: str = "ViT-B-32", overrides: dict | None = None,
                 preprocess: dict | None = None) -> None:
        super().__init__()
        open_clip = open_clip_package()
        if arch not in open_clip.list_models():
            raise VLToolsError(f"model.arch: {arch!r} is not an open_clip architecture; use one of "
                               "open_clip.list_models(), e.g. ViT-B-32")
        try:   # the device a meta-device size check builds on (vltools.models.check_model_size), else the CPU
            with random_init_quiet():
                self.clip = open_clip.create_model(arch, pretrained=None, device=torch.get_default_device(),
                                                   force_preprocess_cfg=dict(preprocess or {}), **dict(overrides or {}))
        except Exception as exc:  # noqa: BLE001 - whatever open_clip raises for a config it cannot build
            raise VLToolsError(f"model.overrides: open_clip cannot build {arch} with {overrides or {}} and "
                               f"preprocess {preprocess or {}} ({first_line(exc)}); give open_clip model-config "
                               "keys (embed_dim, vision_cfg, text_cfg) of that architecture's kind") from None

    def forward(self, images: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(image features [B, E], text features [B, E], both l2-normalised, exp(logit_scale)) of preprocessed
        images [B, 3, S, S] and open_clip token ids [B, context_length]."""
        return (self.clip.encode_image(images, normalize=True), self.clip.encode_text(tokens, normalize=True),
                self.clip.logit_scale.exp())

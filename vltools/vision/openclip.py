"""OpenCLIP models through the open_clip package itself (`pip install '.[clip]'`): its architectures, its pretrained
weights, its preprocessing and its tokenizer, called, never copied.

`build_openclip` turns an `OpenClipSpec` (`openclip:ARCH[:PRETRAINED_OR_FILE]`, vltools.io.model_store) into the
model in eval mode with its preprocess and tokenizer, and what outputs record of it (architecture, weights,
digest, preprocessing). A pretrained tag is fetched by open_clip into its cache (the Hugging Face hub cache, or
~/.cache/clip for URL-only tags); offline and not cached, it is one line naming the tag, the cache folder and
`vltools models add openclip:ARCH:TAG FILE`. Weights files are read without pickle (open_clip's
torch.load(weights_only=True), or safetensors).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import socket
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from urllib.parse import urlparse

import torch
from torch import nn

from vltools.errors import VLToolsError, first_line
from vltools.io.checkpoints import file_digest
from vltools.io.model_store import OpenClipSpec

SEED = 0                  # the random weights of `openclip:ARCH:random`
DOWNLOAD_TIMEOUT_S = 30   # no download hangs
SHOWN_ARCHS = ("ViT-B-32", "ViT-B-16", "ViT-L-14", "RN50", "convnext_base_w")


@dataclass
class OpenClip:
    """An open_clip model (eval mode) with its own preprocess (PIL image -> [3, H, W] tensor) and tokenizer (texts
    -> [N, context] token ids), and what outputs record: `arch`, `weights` (the tag, the file's name, or
    "random (seed 0)"), `digest` (of the weights file; of the architecture and seed for random weights) and
    `preprocess_cfg` (open_clip's preprocessing settings)."""

    model: nn.Module
    preprocess: Callable[[object], torch.Tensor]
    tokenizer: Callable[[Sequence[str]], torch.Tensor]
    arch: str
    weights: str
    digest: str
    preprocess_cfg: dict

    def provenance(self) -> dict[str, str]:
        """The attributes an output records of this model."""
        return {"architecture": self.arch, "pretrained": self.weights,
                "preprocess": json.dumps(self.preprocess_cfg, sort_keys=True, default=str)}


def open_clip_package() -> ModuleType:
    """The open_clip package, or one line saying how to install it."""
    try:
        import open_clip
    except ImportError:
        raise VLToolsError("OpenCLIP models need the open_clip package: pip install 'vltools[clip]' (or pip install "
                           "open-clip-torch)") from None
    return open_clip


def cache_folder(cfg: dict) -> str:
    """Where open_clip keeps the weights of a pretrained tag's config `cfg`, in words for a message."""
    if cfg.get("hf_hub"):
        from huggingface_hub import constants

        return f"{constants.HF_HUB_CACHE} (the Hugging Face hub cache, set by HF_HOME or HF_HUB_CACHE)"
    return f"{Path('~/.cache/clip').expanduser()} (open_clip's cache)"


@contextlib.contextmanager
def _hub_offline() -> Iterator[None]:
    """Within: the Hugging Face hub reads its cache only (its offline mode), whatever the environment says."""
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before


class _RandomInitNote(logging.Filter):
    """Drops open_clip's root-logger warning that a model built without weights is random: vltools says so itself
    (its weights "random (seed 0)", a checkpoint's own weights loaded next)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("No pretrained weights loaded")


@contextlib.contextmanager
def random_init_quiet() -> Iterator[None]:
    """Within: open_clip builds models without weights silently (`_RandomInitNote`)."""
    note = _RandomInitNote()
    logging.getLogger().addFilter(note)
    try:
        yield
    finally:
        logging.getLogger().removeFilter(note)


def fetch_pretrained(spec: OpenClipSpec) -> Path:
    """The weights file of pretrained tag `spec.tag` from open_clip's cache, else downloaded into it by open_clip
    once the host answers (within DOWNLOAD_TIMEOUT_S: no retries against an unreachable host); not there and not
    downloadable: one line saying what to fetch and where to put it."""
    open_clip = open_clip_package()
    cfg = open_clip.get_pretrained_cfg(spec.arch, spec.tag)
    if cfg.get("hf_hub"):
        with contextlib.suppress(Exception), _hub_offline():
            return Path(open_clip.download_pretrained(cfg))
    source = cfg.get("hf_hub") or cfg.get("url")
    host = "huggingface.co" if cfg.get("hf_hub") else urlparse(cfg["url"]).hostname
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    try:
        socket.create_connection((host, 443), timeout=DOWNLOAD_TIMEOUT_S).close()
        return Path(open_clip.download_pretrained(cfg))
    except Exception as exc:  # noqa: BLE001 - offline, refused or interrupted: the same advice
        raise VLToolsError(f"{spec}: the pretrained weights {spec.arch} {spec.tag} are not in open_clip's cache and "
                           f"cannot be downloaded from {source} ({first_line(exc)}); with network, open_clip fetches "
                           f"them into {cache_folder(cfg)}: copy that cache here, or download the weights file and "
                           f"register it with `vltools models add openclip:{spec.arch}:{spec.tag} FILE`") from None
    finally:
        socket.setdefaulttimeout(previous)


def _check(open_clip: ModuleType, spec: OpenClipSpec) -> dict:
    """The pretrained config of `spec`'s tag ({} for a file or random weights), refusing an unknown architecture
    or tag in one line."""
    if spec.arch not in open_clip.list_models():
        raise VLToolsError(f"{spec}: {spec.arch!r} is not an open_clip architecture; use one of open_clip.list_models()"
                           f", e.g. {', '.join(SHOWN_ARCHS)}")
    if spec.random:
        return {}
    tags = open_clip.list_pretrained_tags_by_model(spec.arch)
    tag = spec.tag if spec.tag is not None or spec.file is not None else (tags[0] if tags else None)
    if tag is None and spec.file is None:
        raise VLToolsError(f"{spec}: open_clip has no pretrained weights for {spec.arch}; give a weights file "
                           f"(openclip:{spec.arch}:FILE) or random weights (openclip:{spec.arch}:random)")
    cfg = open_clip.get_pretrained_cfg(spec.arch, tag) if tag is not None else {}
    if tag is not None and not cfg:
        raise VLToolsError(f"{spec}: {tag!r} is not a pretrained tag of {spec.arch}; its tags: {', '.join(tags)} "
                           f"(or a weights file, or random)")
    return {**cfg, "tag": tag}


def build_openclip(spec: OpenClipSpec) -> OpenClip:
    """The model `spec` names, in eval mode on the CPU, with open_clip's preprocess and tokenizer for it: random
    weights (seeded with SEED, the global random state left as it was), a weights file, or a pretrained tag
    (fetched by `fetch_pretrained`; a file registered for a tag takes the tag's preprocessing)."""
    open_clip = open_clip_package()
    cfg = _check(open_clip, spec)
    if spec.random:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(SEED)
            with random_init_quiet():
                model, _, preprocess = open_clip.create_model_and_transforms(spec.arch, pretrained=None)
        weights = f"random (seed {SEED})"
        digest = hashlib.sha256(f"openclip:{spec.arch}:random:{SEED}".encode()).hexdigest()[:16]
    else:
        tag = cfg.get("tag")
        path = spec.file if spec.file is not None else fetch_pretrained(OpenClipSpec(spec.arch, tag, given=str(spec)))
        try:
            model, _, preprocess = open_clip.create_model_and_transforms(
                spec.arch, pretrained=str(path), image_mean=cfg.get("mean"), image_std=cfg.get("std"),
                image_interpolation=cfg.get("interpolation"), image_resize_mode=cfg.get("resize_mode"))
        except Exception as exc:  # noqa: BLE001 - whatever open_clip or torch.load raise, the file does not fit
            raise VLToolsError(f"{path}: not open_clip weights of {spec.arch} that load without pickle "
                               f"({first_line(exc)}); give the weights file of that architecture (.pt, .bin or "
                               ".safetensors)") from None
        weights = tag if spec.file is None else f"{path.name}{f' ({tag})' if tag else ''}"
        digest = file_digest(path)
    return OpenClip(model.eval(), preprocess, open_clip.get_tokenizer(spec.arch), spec.arch, weights, digest,
                    dict(model.visual.preprocess_cfg))


def preprocess_of(model: nn.Module) -> Callable[[object], torch.Tensor]:
    """open_clip's inference preprocess for `model`, from the preprocessing settings open_clip recorded on it
    (`model.visual.preprocess_cfg`), as `open_clip.create_model_and_transforms` builds it."""
    cfg = model.visual.preprocess_cfg
    return open_clip_package().image_transform(cfg["size"], is_train=False, mean=cfg.get("mean"), std=cfg.get("std"),
                                               resize_mode=cfg.get("resize_mode"),
                                               interpolation=cfg.get("interpolation"),
                                               fill_color=cfg.get("fill_color", 0))


def tokenizer_of(model: nn.Module, arch: str) -> Callable[[Sequence[str]], torch.Tensor]:
    """open_clip's tokenizer of architecture `arch` at `model`'s context length (a small model's may be shorter)."""
    return open_clip_package().get_tokenizer(arch, context_length=model.context_length)


def trained_openclip(model: nn.Module, arch: str, path: Path) -> OpenClip:
    """An open_clip model of `arch` whose weights a vltools checkpoint at `path` holds (`train --model clip`), with
    its preprocess and tokenizer, as an `OpenClip` (eval mode)."""
    return OpenClip(model.eval(), preprocess_of(model), tokenizer_of(model, arch), arch, f"{path.name} (vltools clip)",
                    file_digest(path), dict(model.visual.preprocess_cfg))

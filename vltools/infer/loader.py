"""Loading what matching needs: checkpoints as models with their vocabularies, checked against the data."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from vltools.errors import VLToolsError, argument
from vltools.infer.settings import ROLES
from vltools.io.checkpoints import TASK_SETTINGS, checkpoint_field, file_digest, load_checkpoint
from vltools.io.features import BOTTOM_UP, FeaturesReader, features_extractor
from vltools.io.fields import INTEGER, TEXT, optional
from vltools.io.model_store import OpenClipSpec, is_openclip, openclip_spec, resolve_models
from vltools.io.progress import log
from vltools.models import default_config, model_from_checkpoint
from vltools.text.captions import CaptionPreprocessing
from vltools.text.vocab import Coverage, Vocabulary
from vltools.vision.openclip import OpenClip, build_openclip, trained_openclip

OPENCLIP_ROLES = ("matching", "encodable")    # what an OpenCLIP model (or a `clip` checkpoint) does: match, encode


@dataclass
class LoadedModel:
    """A checkpoint built into its model (eval mode), with its vocabulary, config and raw payload."""

    path: Path
    name: str
    model: nn.Module
    words: list[str]
    config: dict
    payload: dict

    def __repr__(self) -> str:
        """What and where, not weights: `LoadedModel('sgr', 'sgr.pt', 1203 words)`."""
        return f"LoadedModel({self.name!r}, {str(self.path)!r}, {len(self.words)} words)"

    @functools.cached_property
    def vocab(self) -> Vocabulary:
        """The caption vocabulary (text models; rmac's words are tf-idf stems, read as `words`)."""
        return Vocabulary(self.words)

    @functools.cached_property
    def digest(self) -> str:
        """Which weights an output came from (first 16 hex digits of the file's SHA-256)."""
        return file_digest(self.path)

    @property
    def settings(self) -> dict:
        """The model's configuration with the defaults its checkpoint left out (img_dim, num_regions...)."""
        return {**default_config(self.name), **self.config}

    @property
    def prep(self) -> CaptionPreprocessing:
        """The caption preprocessing the model was trained with (captioners, L2C)."""
        default = CaptionPreprocessing()
        return CaptionPreprocessing(*(checkpoint_field(self.payload, f"{TASK_SETTINGS}.{name}", kind, self.path,
                                                       getattr(default, name))
                                      for name, kind in (("tokenizer", TEXT), ("min_count", INTEGER),
                                                         ("max_words", INTEGER))))

    def tokenize(self, captions: Sequence[str], coverage: Coverage | None = None) -> list[list[int]]:
        """Token ids of each caption (wrapped in <start> ... <end>) in this checkpoint's vocabulary; `coverage`,
        when given, counts the words encoded and those outside the vocabulary."""
        return self.vocab.encode_all(captions, coverage=coverage)


@dataclass(repr=False)
class OpenClipModel(LoadedModel):
    """An OpenCLIP model (vltools.vision.openclip) as a loaded model: `path` is its `openclip:...` name (or the
    file of a `clip` checkpoint that `train --model clip` wrote), `model` open_clip's model, `clip` the model with
    its preprocess, tokenizer and provenance."""

    clip: OpenClip | None = None

    def __repr__(self) -> str:
        return f"LoadedModel('openclip', {str(self.path)!r}, {self.clip.arch}, {self.clip.weights})"

    @property
    def digest(self) -> str:
        """Which weights an output came from (vltools.vision.openclip.OpenClip.digest)."""
        return self.clip.digest

    def tokenize(self, captions: Sequence[str], coverage: Coverage | None = None) -> list[list[int]]:
        """open_clip's token ids of each caption (its tokenizer's context length, padded with 0)."""
        return self.clip.tokenizer(list(captions)).tolist()


def load_openclip(spec: OpenClipSpec | str, role: str = "encodable", option: str = "model") -> OpenClipModel:
    """The OpenCLIP model of `spec` (an `OpenClipSpec` or its `openclip:...` name) for `role`, which must be one an
    OpenCLIP model has (zero-shot matching, encoding)."""
    spec = spec if isinstance(spec, OpenClipSpec) else openclip_spec(str(spec), option)
    if role not in OPENCLIP_ROLES:
        raise VLToolsError(ROLES[role][1].format(path=spec, model="openclip", role=argument(option)))
    clip = build_openclip(spec)
    return OpenClipModel(Path(str(spec)), "openclip", clip.model, [], {"arch": clip.arch}, {}, clip)


def _clip_checkpoint(path: Path, payload: dict, role: str, option: str) -> OpenClipModel:
    """A `clip` checkpoint (`train --model clip`) as the OpenCLIP model its weights make, for `role`."""
    if role not in OPENCLIP_ROLES:
        raise VLToolsError(ROLES[role][1].format(path=path, model="clip", role=argument(option)))
    arch = str({**default_config("clip"), **dict(payload.get("config") or {})}["arch"])
    clip = trained_openclip(model_from_checkpoint(payload, str(path)).clip, arch, path)
    return OpenClipModel(path, "clip", clip.model, [], dict(payload.get("config") or {}), payload, clip)


def load_named(value: str | os.PathLike | OpenClipSpec, role: str = "matching", option: str = "model") -> LoadedModel:
    """The one model a `--model` value names: a checkpoint file, a model-store name with one member, or an OpenCLIP
    model (`openclip:ARCH[:PRETRAINED_OR_FILE]`), loaded for `role` (see `load_model`)."""
    paths = [value] if isinstance(value, OpenClipSpec) else resolve_models([str(value)], option)
    if len(paths) != 1:
        raise VLToolsError(f"{argument(option, str(value))}: names an ensemble of {len(paths)} checkpoints; give one "
                           "model")
    return load_model(paths[0], role, option)


def load_model(path: str | os.PathLike | OpenClipSpec, role: str = "matching", option: str = "model") -> LoadedModel:
    """The one checkpoint loader: a vltools checkpoint (weights only) of a model `role` accepts (see ROLES),
    built in eval mode; any other checkpoint is one line naming the file and what argument `option` (its Python
    name) needs. An OpenCLIP model (`openclip:...`, an `OpenClipSpec`) is built by `load_openclip`."""
    if is_openclip(path):
        return load_openclip(path, role, option)
    payload = load_checkpoint(path)
    accepted, refusal = ROLES[role]
    name = payload.get("model")
    if name == "clip":
        return _clip_checkpoint(Path(path), payload, role, option)
    if role in ("matching", "encodable") and not payload.get("vocab"):
        raise VLToolsError(f"{path}: checkpoint has no vocabulary; matching needs the words the model was "
                           "trained with (retrain, or convert with --vocab)")
    if name not in accepted:
        raise VLToolsError(refusal.format(path=path, model=name, role=argument(option)))
    model = model_from_checkpoint(payload, str(path))
    return LoadedModel(Path(path), str(name), model, list(payload.get("vocab") or []),
                       dict(payload.get("config") or {}), payload)


def no_model() -> VLToolsError:
    """The error of a stage given features to score and no model to score them with."""
    return VLToolsError(f"no model given; pass {argument('model', 'CHECKPOINT')} or a stored name (a list of them "
                        "for an ensemble)")


def load_models(paths: Sequence[str | os.PathLike]) -> list[LoadedModel]:
    """Load every checkpoint; an ensemble's members must share the vocabulary (same caption tokens) and the
    region features they read (img_dim, num_regions)."""
    if not paths:
        raise no_model()
    loaded = [load_model(path) for path in paths]
    if len(loaded) > 1 and any(isinstance(item, OpenClipModel) for item in loaded):
        raise VLToolsError(f"{argument('model')}: an OpenCLIP model ranks images and captions on its own (zero-shot); "
                           f"it is no member of an ensemble (CLIP before SGRAF: {argument('rerank_k', 'K')} "
                           f"{argument('first_stage', 'openclip:ARCH')})")
    for other in loaded[1:]:
        if other.vocab.words != loaded[0].vocab.words:
            raise VLToolsError(f"{other.path}: its vocabulary differs from that of {loaded[0].path}; the models of "
                               "an ensemble must be trained on the same vocabulary (train with --vocab)")
        for key in ("img_dim", "num_regions"):
            mine, first = other.config.get(key), loaded[0].config.get(key)
            if mine is not None and first is not None and mine != first:
                raise VLToolsError(f"{other.path}: {key}={mine} but {loaded[0].path} has {key}={first}; the models "
                                   "of an ensemble must read the same region features")
    return loaded


def region_options(attrs: Mapping[str, object], count: int) -> list[str]:
    """The `vltools extract-regions` options that give `count` regions per image, for features made as `attrs`
    (a features file's attributes) record: a grid's image size (its side in cells times the backbone's stride)
    or the detector's --num-regions, then the bottom-up detector's (the features the released models read)."""
    options = []
    side, stride = math.isqrt(count), attrs.get("stride")
    if attrs.get("regions") == "grid" and side * side == count and stride:
        options.append(f"--image-size {side * int(stride)} (a {side} x {side} grid at stride {stride})")
    if attrs.get("regions") == "detector":
        options.append(f"--num-regions {count}")
    return [*options, f"--regions bottom-up --num-regions {count}"]


def _regions_made(attrs: Mapping[str, object], count: int) -> str:
    """How the features' regions were made, in words for an error: " (a 14 x 14 grid of --image-size 448)"."""
    side = math.isqrt(count)
    if attrs.get("regions") == "grid" and side * side == count and attrs.get("image_size"):
        return f" (a {side} x {side} grid of --image-size {attrs['image_size']})"
    return f" ({attrs['regions']} regions)" if attrs.get("regions") else ""


def check_features(reader: FeaturesReader, loaded: Sequence[LoadedModel]) -> None:
    """Everything the features' header says against what every model was built for, before any model work:
    region features of the width (img_dim) and, for a model built for a fixed number of regions (SGR, SAF),
    that number per image; the error names the extract-regions options that make them (`region_options`). A
    model whose checkpoint records another feature extractor than the features' (see `trained_extractor`) gets
    a one-line warning."""
    for item in loaded:
        if getattr(item.model, "inputs", "regions") != "regions":
            raise VLToolsError(f"{item.path}: model {item.name!r} reads per-image vectors (context and concept "
                               f"scores), not region features; run `vltools encode CONTEXT.h5 --concepts CONCEPTS.h5 "
                               f"--model {item.path} -o IMG_EMB.h5` and `vltools encode CAPS.jsonl --model {item.path} "
                               "-o CAP_EMB.h5`, then `vltools match IMG_EMB.h5 CAP_EMB.h5`")
    if "regions" not in reader.fields:
        raise VLToolsError(f"{reader.path}: has no /regions dataset; matching models need region features "
                           "(vltools extract-regions)")
    _, count, dim = reader.shape("regions")
    for item in loaded:
        wanted = item.settings.get("img_dim")
        if wanted is not None and int(wanted) != dim:
            trained = trained_extractor(item.payload, item.path)
            raise VLToolsError(f"{reader.path}: regions are {dim}-d but {item.path} was trained on {wanted}-d "
                               f"features{f' of {trained}' if trained else ''}; use features from the same "
                               "extractor as the training data")
        wanted = item.settings.get("num_regions")
        if wanted is not None and int(wanted) != count:
            made = _regions_made(reader.attrs, count)
            raise VLToolsError(f"{reader.path}: the images have {count} regions each{made} but {item.path} was "
                               f"built for num_regions={wanted}; extract them again with "
                               f"{' or '.join(region_options(reader.attrs, int(wanted)))}, or train a model on "
                               "these features")
    extractor = features_extractor(reader.attrs)
    for item in loaded:
        trained = trained_extractor(item.payload, item.path)
        if extractor and trained and extractor != trained:
            fix = "vltools extract-regions --regions bottom-up" if trained == BOTTOM_UP else \
                "extract them as the training features were"
            log.warning(f"{reader.path}: features from {extractor}, but {item.path} was trained on {trained} "
                        f"features; its scores may mean little ({fix})")


def trained_extractor(payload: dict, path: object) -> str | None:
    """The feature extractor the checkpoint at `path` was trained on, where it records it (`train_state.inputs.
    feature_extractor`: trained by vltools, or `bottom-up` for the converted released checkpoints)."""
    return checkpoint_field(payload, "train_state.inputs.feature_extractor", optional(TEXT), path, None)

"""Models by name, their default configurations, and building one from a checkpoint.

Captioners (`neuraltalk2`, `adaptive-attention`) are vltools.models.captioners.Captioner subclasses; `l2c`
describes differences of image pairs (vltools.models.l2c). Every
matching model encodes images and captions separately and scores every image against every caption:
`encode_images(regions, num_regions)`, `encode_captions(tokens, lengths)`,
`similarity(img_emb, cap_emb, cap_lengths) -> [Bi, Bc]`, `forward(...) -> [B, B]`, and the class
attribute `separable` (True when similarity is an inner product of [B, E] embeddings).
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import math
import os
from collections.abc import Iterator, Mapping

import torch
from torch import nn

from vltools import __version__
from vltools.errors import VLToolsError, first_line
from vltools.io.checkpoints import SCHEMA_KEY


class ModelRegistry(Mapping[str, type[nn.Module]]):
    """Model classes by name, each imported from its module (vltools.models.<module>) when first looked up, so
    that loading a matching or captioning model does not import what only others need (torchvision: about a
    second of every stage's start-up)."""

    def __init__(self, classes: dict[str, str]) -> None:
        self.classes = classes   # name -> "module:Class"

    def __getitem__(self, name: str) -> type[nn.Module]:
        module, cls = self.classes[name].split(":")
        return getattr(importlib.import_module(f"vltools.models.{module}"), cls)

    def __iter__(self) -> Iterator[str]:
        return iter(self.classes)

    def __len__(self) -> int:
        return len(self.classes)


MODELS = ModelRegistry({"vse": "vse:VSE", "sgr": "sgraf:SGR", "saf": "sgraf:SAF",
                        "neuraltalk2": "captioners:NeuralTalk2", "adaptive-attention": "captioners:AdaptiveAttention",
                        "rmac": "rmac:RMAC", "sco": "sco:SCO", "l2c": "l2c:L2C", "concepts": "concepts:ConceptCNN",
                        "bottom-up": "bottom_up:BottomUpAttention", "clip": "clip:Clip"})
# models whose checkpoints carry no vocabulary: no text side, or a tokenizer of their own (CLIP's BPE)
NO_VOCABULARY = {"bottom-up", "clip"}


def _model_class(name: str) -> type[nn.Module]:
    if name not in MODELS:
        raise VLToolsError(f"unknown model {name!r}; choose one of {', '.join(sorted(MODELS))}")
    return MODELS[name]


def default_config(name: str) -> dict:
    """The released code's default hyper-parameters of model `name` (a fresh dict)."""
    return dict(_model_class(name).DEFAULTS)


# The most any integer setting (a size, count or dimension) may be: far above any published model, and far below
# what would ask for an impossible allocation before the memory check can say so.
MAX_SIZE = 2**20
# The declared range of each model setting whose range is not the rule for its default's type (an integer: a
# size, count or dimension, from 1 to MAX_SIZE; a float: finite and at least 0): (lowest, whether the lowest
# itself is allowed, highest or None, whether the highest is allowed), by setting name in any model.
SETTING_RANGES: dict[str, tuple[float, bool, float | None, bool]] = {
    "dropout": (0.0, True, 1.0, False), "gen_dropout": (0.0, True, 1.0, False), "sampling": (0.0, True, 1.0, True),
    "gcn_steps": (0, True, MAX_SIZE, True), "rpn_min_size": (0, True, MAX_SIZE, True),
    "lambda_softmax": (0.0, False, None, False), "bn_eps": (0.0, False, None, False),
    "rpn_nms": (0.0, False, 1.0, True), "class_nms": (0.0, False, 1.0, True),
}
INT_RANGE = (1, True, MAX_SIZE, True)
FLOAT_RANGE = (0.0, True, None, False)
PARAMETER_BYTES = 4  # float32


def _shown(bounds: tuple[float, bool, float | None, bool]) -> str:
    low, low_ok, high, high_ok = bounds
    return f"{'[' if low_ok else '('}{low}, {'inf' if high is None else high}{']' if high_ok else ')'}"


def check_model_config(name: str, config: dict, source: str = "model") -> None:
    """Check every setting of `config` for model `name` against its schema: a known key, the type of its default
    (bool, integer, number, string, list) and its range (SETTING_RANGES, else the rule for that type), before
    anything is built; an error names `source`.key (e.g. `model.embed_size`)."""
    defaults = default_config(name)
    unknown = sorted(set(config) - set(defaults))
    if unknown:
        raise VLToolsError(f"model {name!r} has no setting {', '.join(unknown)}; "
                           f"its settings are {', '.join(sorted(defaults))}")
    for key, value in config.items():
        default, where = defaults[key], f"{source}.{key}"
        if isinstance(default, bool) or isinstance(value, bool):
            if type(value) is not type(default):
                raise VLToolsError(f"{where} must be {'true or false' if isinstance(default, bool) else 'a number'}, "
                                   f"not {value!r}")
            continue
        if isinstance(default, (int, float)):
            wanted = int if isinstance(default, int) else (int, float)
            if not isinstance(value, wanted) or (isinstance(value, float) and not math.isfinite(value)):
                raise VLToolsError(f"{where} must be {'an integer' if wanted is int else 'a finite number'}, "
                                   f"not {value!r}")
            bounds = SETTING_RANGES.get(key, INT_RANGE if isinstance(default, int) else FLOAT_RANGE)
            low, low_ok, high, high_ok = bounds
            if value < low or (value == low and not low_ok) or (high is not None and (value > high or (
                    value == high and not high_ok))):
                raise VLToolsError(f"{where} must be in {_shown(bounds)}, not {value!r}")
        elif default is not None and not isinstance(value, type(default)):
            raise VLToolsError(f"{where} must be {type(default).__name__}, not {value!r}")


def _construct(name: str, full: dict, vocab_size: int) -> nn.Module:
    if name == "concepts":  # a torchvision trunk: built from its name, weights loaded by the caller
        from vltools.models.concepts import build_concept_cnn

        return build_concept_cnn(str(full["backbone"]), "none", int(full["num_concepts"]))[0]
    return _model_class(name)(vocab_size=vocab_size, **full)


def machine_memory() -> int:
    """This machine's physical memory in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


# the initialisers that draw from a normal distribution, which the meta device runs through torch._refs
NORMAL_INITS = ("normal_", "trunc_normal_", "xavier_normal_", "kaiming_normal_", "orthogonal_")


@contextlib.contextmanager
def _meta_normal_skipped() -> Iterator[None]:
    """`NORMAL_INITS` of a meta tensor (shapes only) left undone while the block runs: on the meta device a normal
    draw runs through torch._refs, whose first call imports torch._dynamo (about 1 s of every stage that loads a
    model, issue 50), for values a meta tensor does not hold. Any other tensor, in any thread, is initialised as
    always."""
    real = {name: getattr(nn.init, name) for name in NORMAL_INITS}

    def skipping(init: object) -> object:
        def skipped(tensor: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
            return tensor if tensor.is_meta else init(tensor, *args, **kwargs)
        return skipped

    for name, init in real.items():
        setattr(nn.init, name, skipping(init))
    try:
        yield
    finally:
        for name, init in real.items():
            setattr(nn.init, name, init)


def check_model_size(name: str, full: dict, vocab_size: int) -> None:
    """Refuse, in one line, a model whose parameters and buffers at 4 bytes each exceed this machine's memory:
    counted on a model built on the meta device (shapes only, nothing allocated), before the real one is built."""
    with torch.device("meta"), _meta_normal_skipped():
        shapes = _construct(name, full, vocab_size)
    count = sum(t.numel() for t in (*shapes.parameters(), *shapes.buffers()))
    memory = machine_memory()
    if count * PARAMETER_BYTES > memory:
        raise VLToolsError(f"model {name!r} with these settings has {count:,} parameters, "
                           f"{count * PARAMETER_BYTES / 2**30:,.1f} GiB at {PARAMETER_BYTES} bytes each, more than "
                           f"this machine's {memory / 2**30:,.1f} GiB of memory; make its sizes smaller")


def build_model(name: str, config: dict, vocab_size: int) -> nn.Module:
    """A freshly initialised model: defaults updated by `config`, checked first (`check_model_config`,
    `check_model_size`)."""
    check_model_config(name, config)
    full = default_config(name)
    full.update(config)
    check_model_size(name, full, vocab_size)
    return _construct(name, full, vocab_size)


def schema_version(name: str) -> int:
    """The config schema version of model `name`, recorded in its checkpoints: 1 until one of its defaults changes
    meaning, when the model's class raises its `SCHEMA` and names in `FORMER_DEFAULTS` each such setting, as
    (the schema that changed it, the value a checkpoint of an older schema without the setting meant). A change
    older than recorded schemas is named with `since` 1 (checkpoints recording none read as UNRECORDED_SCHEMA) and,
    when it landed before schemas were recorded, a third item: the UTC time it landed, from which a checkpoint
    without a schema was created with today's meaning."""
    return int(getattr(_model_class(name), "SCHEMA", 1))


UNRECORDED_SCHEMA = 0  # a checkpoint written before checkpoints recorded their schema (commit 2f20fbd)


def _created_after(payload: dict, landed: str) -> bool:
    """Whether the checkpoint's provenance says it was created at or after the UTC time `landed` (no readable
    time: False, the older reading)."""
    created = (payload.get("provenance") or {}).get("created")
    try:
        return datetime.datetime.fromisoformat(str(created)) >= datetime.datetime.fromisoformat(landed)
    except (TypeError, ValueError):
        return False


def checkpoint_config(payload: dict, source: str = "checkpoint") -> dict:
    """The config a loaded checkpoint meant: a setting it lacks whose default changed meaning since its schema
    (no schema recorded: UNRECORDED_SCHEMA) is read with the meaning it had then, never with today's default; a
    schema newer than this vltools knows is refused, since what its settings mean cannot be known here."""
    name, config = payload["model"], dict(payload["config"])
    schema, current = payload.get(SCHEMA_KEY, UNRECORDED_SCHEMA), schema_version(name)
    if SCHEMA_KEY in payload and (isinstance(schema, bool) or not isinstance(schema, int) or schema < 1):
        raise VLToolsError(f"{source}: checkpoint's config schema {schema!r} is not a version; copy or train it "
                           "again")
    if schema > current:
        version = (payload.get("provenance") or {}).get("vltools_version")
        written = f"vltools {version}" if version else "a later vltools"
        raise VLToolsError(f"{source}: model {name!r} was saved with config schema {schema} by {written}; "
                           f"this vltools {__version__} reads its schema {current} at most: upgrade vltools")
    for key, (since, meant, *landed) in getattr(_model_class(name), "FORMER_DEFAULTS", {}).items():
        created_since = bool(landed) and _created_after(payload, landed[0])
        if key not in config and schema < since and not created_since:
            config[key] = meant
    return config


def model_from_checkpoint(payload: dict, source: str = "checkpoint") -> nn.Module:
    """The model stored in a loaded vltools checkpoint (see vltools.io.checkpoints), in eval mode; `source`
    (the file) names it in errors."""
    vocab = payload.get("vocab") or []
    if not vocab and payload.get("model") not in NO_VOCABULARY:
        raise VLToolsError(f"{source}: checkpoint of model {payload.get('model')!r} has no vocabulary; "
                           "it must be saved with the word list its text encoder was trained on")
    config = checkpoint_config(payload, source)
    check_model_config(payload["model"], config, f"{source}: its config's model")
    model = build_model(payload["model"], config, len(vocab))
    try:
        model.load_state_dict(payload["state_dict"], strict=True)
    except RuntimeError as exc:
        raise VLToolsError(f"{source}: checkpoint weights do not fit model {payload['model']!r} with its config "
                           f"({first_line(exc)})") from None
    return model.eval()

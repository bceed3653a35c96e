"""Training configuration: sectioned defaults, a YAML file over them, then `--set key=value` overrides.

A configuration is a dict of sections (`train` for the generic loop, `task` for the task's own
options such as the loss margin, `model` for the model's constructor). Every value is typed by its
default, so a YAML file or a `--set` cannot slip a string where a number belongs, and a key that no
default names is an error that names it: a typo never silently trains with the default.
"""

from __future__ import annotations

import copy
import difflib
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import yaml

from vltools.errors import VLToolsError, argument, require_file, shown
from vltools.infer.checks import MAX_INTEGER, MAX_SEED

# The generic loop's options; defaults are the official SGRAF ones (Paranioar/SGRAF opts.py).
TRAIN_DEFAULTS: dict[str, object] = {
    "epochs": 40,
    "batch_size": 128,        # global batch: split evenly over processes (DDP) and `accumulate` micro-batches
    "accumulate": 1,          # micro-batches per process per step (gradients averaged, as DDP averages)
    "lr": 2e-4,
    "lr_update": 30,          # the learning rate is divided by 10 every `lr_update` epochs
    "grad_clip": 2.0,         # max total gradient norm; 0 disables clipping
    "val_every": 1000,        # validate every N iterations (0: only at the end of each epoch)
    "keep_best": "any",       # best checkpoint from: any validation (vltools), epoch_end validations only (released)
    "precision": "fp32",      # IEEE fp32, tf32 (TF32 on GPUs), or autocast to bf16 / fp16 (fp16: gradient scaler)
    "save_every": 1000,       # write the resume file every N iterations (0: only at the end of each epoch)
    "save_seconds": 180.0,    # and once N seconds have passed since it was last written (0: not by time)
    "log_every": 10,          # one loss line in the log every N iterations
    "seed": 0,
    "workers": 0,
    "device": "auto",
}

KEEP_BEST = ("any", "epoch_end")



@dataclass(frozen=True)
class BackboneSchedule:
    """`vltools synth-backbone`'s defaults (vltools.training.synth_backbone): Adam, the learning rate divided by 10 for
    the last epoch."""

    image_size: int = 96
    epochs: int = 4
    batch_size: int = 32
    lr: float = 2e-3


BACKBONE = BackboneSchedule()

TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")


def _type_name(value: object) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        type(value), type(value).__name__)


def coerce(value: object, default: object, key: str, source: str) -> object:
    """`value` converted to the type of `default`; a wrong type is an error naming `key` and `source`."""
    expected = type(default)
    if default is None or isinstance(value, expected) and not (expected is int and isinstance(value, bool)):
        return value
    if isinstance(value, str):
        text = value.strip()
        if expected is bool and text.lower() in TRUE_WORDS + FALSE_WORDS:
            return text.lower() in TRUE_WORDS
        if expected in (int, float):
            try:
                return expected(text)
            except ValueError:
                pass
    elif expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    raise VLToolsError(f"{source}: {key} must be {_type_name(default)}, not {shown(value)}")


def check_choice(key: str, value: object, allowed: Iterable[str]) -> None:
    """A string option must be one of `allowed`; otherwise a one-line error naming them."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise VLToolsError(f"{key} must be one of {', '.join(allowed)}, not {shown(value)}")


def _locate(defaults: Mapping[str, Mapping[str, object]], key: str, source: str) -> tuple[str, str]:
    """(section, name) for `section.name` or a bare `name` found in exactly one section."""
    if "." in key:
        section, name = key.split(".", 1)
        if section not in defaults:
            raise VLToolsError(f"{source}: unknown section {section!r} in {key!r}; sections are "
                               f"{', '.join(defaults)}")
        if name not in defaults[section]:
            raise _unknown(defaults, key, source)
        return section, name
    owners = [section for section, values in defaults.items() if key in values]
    if not owners:
        raise _unknown(defaults, key, source)
    if len(owners) > 1:
        raise VLToolsError(f"{source}: {key!r} is in several sections; write one of "
                           f"{', '.join(f'{s}.{key}' for s in owners)}")
    return owners[0], key


def _unknown(defaults: Mapping[str, Mapping[str, object]], key: str, source: str) -> VLToolsError:
    known = [f"{s}.{k}" for s, values in defaults.items() for k in values]
    close = difflib.get_close_matches(key, known + [k.split(".", 1)[1] for k in known], n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
    return VLToolsError(f"{source}: unknown config key {key!r}; {hint}")


def parse_yaml(text: str, source: str) -> object:
    """`text` (of `source`, a config file or a --set) parsed as YAML; malformed or nested too deep for the parser
    (a RecursionError) is one line naming `source`."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise VLToolsError(f"{source}: {where}not valid YAML ({getattr(exc, 'problem', exc)})") from None
    except RecursionError:
        raise VLToolsError(f"{source}: not valid YAML (nested too deeply); nest sections and values a few "
                           "levels at most") from None


def read_yaml(path: str | os.PathLike) -> dict:
    """The YAML file as a dict of sections (one-line errors for a missing or malformed file)."""
    path = require_file(path, "no such config file")
    data = parse_yaml(path.read_text(encoding="utf-8"), str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise VLToolsError(f"{path}: a config file must be a mapping of sections (train:, task:, model:)")
    return data


def parse_override(text: str) -> tuple[str, str]:
    """`key=value` -> (key, value text)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise VLToolsError(f"--set {text!r}: expected KEY=VALUE, for example --set train.lr=1e-4")
    return key.strip(), value


def build_config(defaults: Mapping[str, Mapping[str, object]], config_file: str | os.PathLike | None = None,
                 overrides: Iterable[str] = (), options: Mapping[str, object] | None = None) -> dict:
    """Defaults, updated by the YAML file, then the `--set` overrides, then explicit options (highest). Every value
    is range-checked where it is given, so a bad `--set` is refused even when an option then sets the same key.

    The file holds sections (`train:`, `task:`, `model:`); `--set` takes `section.key=value` or a bare
    `key=value` when only one section has that key; `options` maps keys the same way to values.
    """
    config = copy.deepcopy({section: dict(values) for section, values in defaults.items()})
    if config_file is not None:
        source = str(config_file)
        for section, values in read_yaml(config_file).items():
            if section not in defaults:
                raise VLToolsError(f"{source}: unknown section {section!r}; sections are {', '.join(defaults)}")
            if not isinstance(values, dict):
                raise VLToolsError(f"{source}: section {section!r} must be a mapping of key: value")
            for name, value in values.items():
                full = f"{section}.{name}"
                _locate(defaults, full, source)
                config[section][name] = checked(full, coerce(value, defaults[section][name], full, source), source)
    for text in overrides:
        key, value = parse_override(text)
        section, name = _locate(defaults, key, f"--set {text}")
        default = defaults[section][name]
        parsed = parse_yaml(value, f"--set {text}") if default is None else value
        config[section][name] = checked(key, coerce(parsed, default, key, f"--set {text}"), f"--set {text}")
    for key, value in (options or {}).items():
        if value is not None:
            section, name = _locate(defaults, key, f"option {key}")
            source = argument(name)    # the option (--epochs) on the command line, the key from Python
            config[section][name] = checked(key, coerce(value, defaults[section][name], key, source), source)
    return config


# value ranges by key name (in any section): (lowest, whether the lowest itself is allowed, highest or None,
# whether the highest is allowed); any float must also be finite
RANGES: dict[str, tuple[float, bool, float | None, bool]] = {
    "lr": (0.0, True, None, False), "dropout": (0.0, True, 1.0, False), "grad_clip": (0.0, True, None, False),
    "margin": (0.0, True, None, False), "epochs": (1, True, None, False), "batch_size": (1, True, None, False),
    "accumulate": (1, True, None, False), "val_batch_size": (1, True, None, False),
    "workers": (0, True, None, False), "val_every": (0, True, None, False), "save_every": (0, True, None, False),
    "save_seconds": (0.0, True, None, False),
    "log_every": (0, True, None, False), "lr_update": (0, True, None, False),
    "seed": (0, True, MAX_SEED, True),
    # the tasks' settings: counts of words, captions, images and steps, and the losses' weights
    "vocab_threshold": (0, True, None, False), "min_count": (0, True, None, False),
    "max_words": (1, True, None, False), "val_captions": (0, True, None, False), "val_images": (0, True, None, False),
    "val_queries": (1, True, None, False), "negatives": (1, True, None, False), "nu": (0.0, False, None, False),
    "gen_weight": (0.0, True, None, False), "tv_weight": (0.0, True, None, False),
    "aux_batch_size": (1, True, None, False), "aux_every": (1, True, None, False), "val_beam": (1, True, None, False),
    "val_max_len": (1, True, None, False), "mine_every": (1, True, None, False), "queries": (1, True, None, False),
    "relevant": (1, True, None, False), "pool": (1, True, None, False), "per_pair": (1, True, None, False),
    "whiten_images": (1, True, None, False), "whiten_eps": (0.0, True, None, False),
    "image_size": (1, True, None, False), "embed_batch": (1, True, None, False),
}


def checked(key: str, value: object, source: str) -> object:
    """`value` once it is in its key's range (check_range); the error names `source` (the file or option)."""
    try:
        check_range(key, value)
    except VLToolsError as exc:
        raise VLToolsError(f"{source}: {exc}") from None
    return value


def check_range(key: str, value: object) -> None:
    """Refuse a non-finite float or a value outside its key's range (RANGES; an integer without a highest there is
    at most MAX_INTEGER; a model's settings have their schema, models.check_model_config) with one line naming
    the key."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise VLToolsError(f"{key} must be a finite number, not {value}")
    bounds = RANGES.get(key.rsplit(".", 1)[-1])
    if bounds is None:
        return
    low, low_ok, high, high_ok = bounds
    if isinstance(value, int) and high is None and value > MAX_INTEGER:
        raise VLToolsError(f"{key} must be at most {MAX_INTEGER}, not {shown(value)}")
    if value < low or (value == low and not low_ok) or (high is not None and (value > high or
                                                                            (value == high and not high_ok))):
        interval = f"{'[' if low_ok else '('}{low}, {high if high is not None else 'inf'}{']' if high_ok else ')'}"
        raise VLToolsError(f"{key} must be in {interval}, not {shown(value)}")

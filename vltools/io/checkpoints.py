"""Checkpoints: plain containers of tensors, saved atomically with a digest of their content, loaded with
weights_only=True and verified against that digest (so a corrupted file is refused, not half-used)."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import warnings
from pathlib import Path

import torch

from vltools.errors import VLToolsError, require_file
from vltools.io.fields import INTEGER, MAPPING, REQUIRED, TEXT, TEXTS, Kind, field, optional
from vltools.io.kinds import same_file
from vltools.io.output import written
from vltools.io.provenance import provenance
from vltools.io.write_errors import DeferredWrites, check_room

CHECKPOINT_FORMAT = "vltools.checkpoint"
DIGEST_KEYS = ("model", "config", "vocab", "state_dict", "train_state")
SCHEMA_KEY = "schema"  # the model's config schema version (vltools.models.schema_version); absent before it existed
REWRITE = "copy or train it again"
TASK_SETTINGS = "train_state.config.task"   # the task section of the training config a checkpoint was trained with
TENSORS = Kind("a mapping of names to tensors", lambda value: isinstance(value, dict) and all(
    isinstance(key, str) and isinstance(tensor, torch.Tensor) for key, tensor in value.items()))
# the type of every top-level field, checked once the digest matched: what every reader of a checkpoint relies on
FIELD_KINDS = {"model": TEXT, "config": MAPPING, "state_dict": TENSORS, "vocab": optional(TEXTS),
               "train_state": MAPPING, SCHEMA_KEY: INTEGER, "provenance": optional(MAPPING)}
REQUIRED_FIELDS = ("model", "config", "state_dict")


def content_digest(value: object) -> str:
    """SHA-256 of a checkpoint's content (tensors by dtype, shape and bytes; containers and scalars by value)."""
    digest = hashlib.sha256()
    _feed(digest, value)
    return digest.hexdigest()


def _feed(digest: hashlib._Hash, value: object) -> None:
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous()
        digest.update(f"T{tensor.dtype}{tuple(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy() if tensor.numel() else b"")   # no copy
    elif isinstance(value, dict):
        digest.update(f"D{len(value)}".encode())
        for key in sorted(value, key=repr):
            digest.update(repr(key).encode())
            _feed(digest, value[key])
    elif isinstance(value, (list, tuple)):
        digest.update(f"L{len(value)}".encode())
        for item in value:
            _feed(digest, item)
    else:
        digest.update(f"S{value!r}".encode())


def _digested(payload: dict) -> dict:
    """What the digest covers: the content keys, and the schema version where the checkpoint records one (so a
    checkpoint written before schemas existed keeps its digest)."""
    covered = {key: payload.get(key) for key in DIGEST_KEYS}
    if SCHEMA_KEY in payload:
        covered[SCHEMA_KEY] = payload[SCHEMA_KEY]
    return covered


def save_checkpoint(path: str | os.PathLike, model: str, config: dict, state_dict: dict,
                    vocab: list[str] | None = None, train_state: dict | None = None, *, schema: int) -> None:
    """Write a vltools checkpoint atomically; everything in it must be a tensor or a plain container. `schema` is
    the model's config schema version (vltools.models.schema_version), so that a later vltools whose defaults
    changed meaning reads the config as it was meant; the provenance records the vltools version. A failed write
    (full disk, file size limit) is one line naming `path`, and an earlier checkpoint there is kept."""
    payload = {
        "format": CHECKPOINT_FORMAT,
        "model": model,
        SCHEMA_KEY: schema,
        "config": dict(config),
        "vocab": list(vocab) if vocab is not None else None,
        "state_dict": {k: v.detach().cpu() for k, v in state_dict.items()},
        "train_state": dict(train_state or {}),
        "provenance": provenance(),
    }
    payload["digest"] = content_digest(_digested(payload))
    _save(path, payload, sum(tensor.nbytes for tensor in payload["state_dict"].values()))


def save_state_dict(path: str | os.PathLike, state_dict: dict) -> None:
    """Write a plain state dict (a dict of tensors, e.g. torchvision weights) atomically, for torch.load with
    weights_only=True; the same tensors always give the same bytes."""
    tensors = {k: v.detach().cpu() for k, v in state_dict.items()}
    _save(path, tensors, sum(tensor.nbytes for tensor in tensors.values()))


def _save(path: str | os.PathLike, payload: dict, nbytes: int) -> None:
    """torch.save `payload` to `path` atomically, after checking there is room for its `nbytes` of tensors."""
    with written(path) as tmp:
        check_room(tmp, nbytes)
        with DeferredWrites(tmp, truncate=True) as stream:   # torch.save reports a failed write without its cause
            torch.save(payload, stream)
            stream.check()


class NeedsPickle(VLToolsError):
    """A torch file that only a full unpickler (which can run code from the file) could read."""


# the digest of each checkpoint file read in this process, by its state (vltools.io.kinds.same_file)
_DIGESTS: dict[tuple[object, ...], str] = {}


def file_digest(path: str | os.PathLike) -> str:
    """First 16 hex digits of the file's SHA-256: which weights an output came from. A checkpoint this process
    has loaded is not read again while it stays the same."""
    key = same_file(path)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        with open(path, "rb") as stream:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                digest.update(chunk)
        _DIGESTS[key] = digest.hexdigest()[:16]
    return _DIGESTS[key]


def load_weights_only(path: str | os.PathLike, what: str, absent: str, empty: str, pickle_fix: str) -> object:
    """The one safe torch.load (weights_only=True, on the CPU): a missing, empty, pickled, truncated or corrupt file
    is one line naming it (`absent`, `empty`: what to say; `pickle_fix`: how to import a trusted pickle)."""
    path = require_file(path, absent)
    if path.stat().st_size == 0:
        raise VLToolsError(f"{path}: {empty}")
    key = same_file(path)
    data = path.read_bytes()      # once: the weights and the file's digest come from the same read
    _DIGESTS[key] = hashlib.sha256(data).hexdigest()[:16]
    try:
        with warnings.catch_warnings():  # the safe unpickler warns about protocols before refusing a plain pickle
            warnings.simplefilter("ignore", UserWarning)
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # whatever the unpickler raises, the file is unusable as it is
        # torch's own messages run over several sentences; what the file is says more, in one complete line
        pickled = data.startswith(b"\x80")
        # a global the safe unpickler refuses: "Unsupported global: GLOBAL x", or "unsupported GLOBAL posix.system
        # whose module posix is blocked" (a pickle inside a torch zip as much as a plain one)
        if isinstance(exc, pickle.UnpicklingError) and ("unsupported global" in str(exc).lower() or pickled):
            raise NeedsPickle(f"{path}: needs pickle to load, which can run arbitrary code, so it is refused; "
                              f"{pickle_fix}") from exc
        if not pickled and not data.startswith(b"PK\x03\x04"):
            raise VLToolsError(f"{path}: not a {what}: it is neither a torch zip archive nor a pickle (another kind "
                               f"of file, or corrupt); give a {what}") from exc
        raise VLToolsError(f"{path}: not a readable {what}, it is truncated or corrupt; copy or write it "
                           "again") from exc


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Load a vltools checkpoint safely (no pickle) and verify its digest; refuse anything else in one line."""
    path = Path(path)
    payload = load_weights_only(
        path, "vltools checkpoint", "no such checkpoint",
        "empty file, not a checkpoint; it may be from an interrupted copy, copy or train it again",
        "if you trust it (e.g. an official SGRAF checkpoint), import it once with "
        f"`vltools convert sgraf-checkpoint {path} --vocab VOCAB.json --trust -o CKPT.pt`")
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise VLToolsError(f"{path}: not a vltools checkpoint (no format '{CHECKPOINT_FORMAT}')")
    saved = payload.get("digest")
    if saved is not None and saved != content_digest(_digested(payload)):
        raise VLToolsError(f"{path}: the checkpoint's content does not match its digest: the file is corrupt; "
                           f"{REWRITE}")
    for key, kind in FIELD_KINDS.items():
        if key in payload or key in REQUIRED_FIELDS:
            payload[key] = field(payload, key, kind, path, REWRITE)
    return payload


def checkpoint_field(payload: dict, key: str, kind: Kind, path: object, default: object = REQUIRED) -> object:
    """A field of a loaded checkpoint below the top level (dotted: "train_state.config.task.image_size"), checked
    for `kind` (`vltools.io.fields.field`); `default` when the checkpoint does not record it."""
    return field(payload, key, kind, path, REWRITE, default=default)

"""Checkpoints: plain containers of tensors, saved atomically, loaded with weights_only=True."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import torch

from vltools.errors import VLToolsError
from vltools.io.atomic import atomic_path
from vltools.io.provenance import provenance

CHECKPOINT_FORMAT = "vltools.checkpoint"


def save_checkpoint(path: str | os.PathLike, model: str, config: dict, state_dict: dict,
                    vocab: list[str] | None = None, train_state: dict | None = None) -> None:
    """Write a vltools checkpoint atomically; everything in it must be a tensor or a plain container."""
    payload = {
        "format": CHECKPOINT_FORMAT,
        "model": model,
        "config": dict(config),
        "vocab": list(vocab) if vocab is not None else None,
        "state_dict": {k: v.detach().cpu() for k, v in state_dict.items()},
        "train_state": dict(train_state or {}),
        "provenance": provenance(),
    }
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Load a vltools checkpoint safely (no pickle); refuse anything else with a one-line error."""
    path = Path(path)
    if not path.exists():
        raise VLToolsError(f"{path}: no such checkpoint")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "Unsupported global" not in str(exc):
            raise VLToolsError(f"{path}: not a readable checkpoint (corrupt or not a torch file)") from exc
        raise VLToolsError(
            f"{path}: needs pickle to load, which can run arbitrary code; if it is an official SGRAF checkpoint "
            "and you trust it, import it with `vltools convert sgraf-checkpoint --trust`"
        ) from exc
    except (RuntimeError, EOFError, OSError) as exc:
        raise VLToolsError(f"{path}: not a readable checkpoint ({str(exc).splitlines()[0][:120]})") from exc
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise VLToolsError(f"{path}: not a vltools checkpoint (no format '{CHECKPOINT_FORMAT}')")
    return payload

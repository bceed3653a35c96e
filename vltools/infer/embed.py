"""Standalone embeddings from separable models (VSE-style): one vector per image or caption, and their files.

Only a separable model (`model.separable`) embeds an image or a caption on its own; a cross-attention
model's encodings mean something only jointly with the other side, inside `model.similarity`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch import nn

from vltools.devices import autocast
from vltools.errors import VLToolsError
from vltools.infer.similarity import block_sizes, encode_captions, encode_images, evaluating
from vltools.io.progress import progress

SIDES = ("images", "captions")


def require_separable(model: nn.Module, name: str, source: object) -> None:
    """A one-line error naming `source` when `model` has no standalone embeddings."""
    if not getattr(model, "separable", False):
        raise VLToolsError(
            f"{source}: model {name!r} is a cross-attention model: its image and caption encodings only mean "
            "something jointly, inside its similarity, so it has no standalone embeddings; use a separable model "
            "(vse) or run `vltools match` with this checkpoint directly")


def embed_blocks(model: nn.Module, blocks: Sequence, side: str, device: torch.device,
                 precision: str = "fp32", show_progress: bool = True) -> Iterator[np.ndarray]:
    """float32 [B, E] embeddings of each block of images or captions (`FeatureBlocks` / `CaptionBlocks`), by the
    model moved to `device` in eval mode; `show_progress` false when the caller reports progress itself (the
    inference runner)."""
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, not {side!r}")
    shown = progress(blocks, total=sum(block_sizes(blocks)), desc=f"encode {side}", unit=side,
                     size=lambda block: len(block[0])) if show_progress else blocks
    with evaluating([model], device), torch.inference_mode(), autocast(device, precision):
        for block in shown:
            if side == "images":
                emb = encode_images([model], block, device)[0]
            else:
                emb = encode_captions([model], block, device)[0][0]
            yield emb.float().cpu().numpy()


def embed_all(model: nn.Module, blocks: Sequence, side: str, device: torch.device,
              precision: str = "fp32") -> np.ndarray:
    """All embeddings of `blocks` as one [N, E] float32 array (for galleries that fit in memory)."""
    return np.concatenate(list(embed_blocks(model, blocks, side, device, precision)))


def full_sims(rows, columns, block: int = 4096) -> np.ndarray:
    """The whole rows x columns inner-product matrix of two embeddings datasets, computed in row blocks."""
    gallery = torch.from_numpy(np.asarray(columns[()], dtype=np.float32))
    return np.concatenate([(torch.from_numpy(np.asarray(rows[s:s + block], dtype=np.float32)) @ gallery.T).numpy()
                           for s in range(0, len(rows), block)])

"""The full n_images x n_captions similarity matrix, computed one (image block x caption block) at a time.

Cross-attention models (SGR, SAF) cannot embed an image or a caption on its own, so every pair goes
through `model.similarity`. Doing all pairs at once would need n_images x n_captions x words x embed
floats; blocks bound the working memory to block_images x block_captions x words x embed floats while
each call stays large and batched (no Python loop per caption). Caption blocks form the outer loop, so
each caption is encoded once per model; image embeddings are cached up to `image_cache_mb` (images beyond
the budget are re-read and re-encoded for every caption block, trading time for memory).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch import nn

from vltools.data.blocks import CaptionBlock, ImageBlock
from vltools.devices import autocast, resolve_device
from vltools.io.progress import progress


@contextlib.contextmanager
def evaluating(models: Sequence[nn.Module], device: torch.device) -> Iterator[None]:
    """Run models on `device` in eval mode (no dropout, BatchNorm running stats), restoring their modes afterwards.

    Each model is moved to `device` in place (nn.Module.to) and stays there, as with any library call that takes
    a device: its inputs go there, so a model left on the CPU would fail on a device mismatch.
    """
    modes = [m.training for m in models]
    for model in models:
        model.to(device).eval()
    try:
        yield
    finally:
        for model, mode in zip(models, modes, strict=True):
            model.train(mode)


def as_models(models: nn.Module | Sequence[nn.Module]) -> list[nn.Module]:
    """One model or several (an ensemble) as a non-empty list."""
    found = [models] if isinstance(models, nn.Module) else list(models)
    if not found:
        raise ValueError("at least one model is needed")
    return found


def block_sizes(blocks: Sequence) -> list[int]:
    """Rows of each block: the sequence's `sizes` when it has them, else the first tensor's length."""
    sizes = getattr(blocks, "sizes", None)
    return list(sizes) if sizes is not None else [len(block[0]) for block in blocks]


def encode_images(models: Sequence[nn.Module], block: ImageBlock, device: torch.device) -> list[torch.Tensor]:
    """Each model's image embeddings of one block: its tensors (None stays None) moved to `device` and passed to
    `encode_images` in order."""
    inputs = [None if t is None else t.to(device, non_blocking=True) for t in block]
    return [model.encode_images(*inputs) for model in models]


def encode_captions(models: Sequence[nn.Module], block: CaptionBlock,
                    device: torch.device) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Each model's caption embeddings of one block, and the lengths on the device."""
    tokens, lengths = (t.to(device, non_blocking=True) for t in block)
    return [model.encode_captions(tokens, lengths) for model in models], lengths


def global_vectors(models: Sequence[nn.Module], embs: Sequence[torch.Tensor], side: str,
                   lengths: torch.Tensor | None = None) -> list[torch.Tensor | None]:
    """Per model, the global vectors of a block of `side` ("images" or "captions") embeddings when the model
    has them (SGR, SAF: self-attention), else None; `similarity` takes them as img_glo / cap_glo."""
    if side == "images":
        return [m.global_images(e) if hasattr(m, "global_images") else None for m, e in zip(models, embs, strict=True)]
    return [m.global_captions(e, lengths) if hasattr(m, "global_captions") else None
            for m, e in zip(models, embs, strict=True)]


def ensemble_similarity(models: Sequence[nn.Module], image_embs: Sequence[torch.Tensor],
                        caption_embs: Sequence[torch.Tensor], lengths: torch.Tensor,
                        globals_: Sequence[tuple] | None = None) -> torch.Tensor:
    """Mean over models of their [Bi, Bc] similarity blocks, in float32 (SGRAF = mean of SGR and SAF).

    `globals_`: per model, precomputed (global images, global captions) of these blocks (see
    `global_vectors`), or (None, None) for a model without them.
    """
    total = None
    for n, (model, img, cap) in enumerate(zip(models, image_embs, caption_embs, strict=True)):
        given = globals_[n] if globals_ is not None else (None, None)
        sims = (model.similarity(img, cap, lengths) if given[0] is None else
                model.similarity(img, cap, lengths, *given)).float()
        total = sims if total is None else total + sims
    return total / len(models)


def similarity_columns(models: nn.Module | Sequence[nn.Module], images: Sequence[ImageBlock],
                       captions: Sequence[CaptionBlock], device: str | torch.device = "cpu",
                       precision: str = "fp32", image_cache_mb: float = 2048.0) -> Iterator[torch.Tensor]:
    """Per caption block, the [n_images, block] float32 CPU columns of the models' mean similarity: every image
    block against it. A caller that keeps each block as it comes (match commits them for --resume) never needs the
    whole matrix at once.

    `images` and `captions` are sequences of blocks (`FeatureBlocks`, `CaptionBlocks`, or lists of tuples already
    in memory); rows and columns follow their order. Runs under inference mode with the models in eval mode, moved
    to `device`; `precision="bf16"` uses autocast.
    """
    models = as_models(models)
    device = resolve_device(device) if isinstance(device, str) else device
    row_starts = np.concatenate([[0], np.cumsum(block_sizes(images))]).astype(int)
    budget = image_cache_mb * 2**20
    # per image block: the embeddings and (SGR, SAF) global vectors; the captions' global vectors are computed
    # once per caption block, not once per image block
    cache: dict[int, tuple[list[torch.Tensor], list[torch.Tensor | None]]] = {}
    cached_bytes = 0
    with evaluating(models, device), torch.inference_mode(), autocast(device, precision):
        for block in captions:
            caption_embs, lengths = encode_captions(models, block, device)
            caption_globals = global_vectors(models, caption_embs, "captions", lengths)
            out = torch.empty(int(row_starts[-1]), len(lengths), dtype=torch.float32)
            for image_index in range(len(images)):
                entry = cache.get(image_index)
                if entry is None:
                    image_embs = encode_images(models, images[image_index], device)
                    entry = (image_embs, global_vectors(models, image_embs, "images"))
                    size = sum(e.numel() * e.element_size() for e in [*entry[0], *entry[1]] if e is not None)
                    if cached_bytes + size <= budget:
                        cache[image_index] = entry
                        cached_bytes += size
                image_embs, image_globals = entry
                rows = slice(row_starts[image_index], row_starts[image_index + 1])
                sims = ensemble_similarity(models, image_embs, caption_embs, lengths,
                                           list(zip(image_globals, caption_globals, strict=True)))
                out[rows] = sims.cpu()
            yield out


def similarity_blocks(models: nn.Module | Sequence[nn.Module], images: Sequence[ImageBlock],
                      captions: Sequence[CaptionBlock], device: str | torch.device = "cpu",
                      precision: str = "fp32", image_cache_mb: float = 2048.0,
                      desc: str = "similarity") -> torch.Tensor:
    """The full [n_images, n_captions] float32 CPU matrix of the models' mean similarity, block by block (see
    `similarity_columns`), with a progress line counting pairs."""
    out = torch.empty(sum(block_sizes(images)), sum(block_sizes(captions)), dtype=torch.float32)
    column = 0
    for block in progress(similarity_columns(models, images, captions, device, precision, image_cache_mb),
                          total=out.numel(), desc=desc, unit="pairs", size=lambda block: block.numel()):
        out[:, column:column + block.shape[1]] = block
        column += block.shape[1]
    return out

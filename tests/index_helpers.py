"""Embeddings files for the saved-index tests: unit rows, clustered or not, written as `encode` writes them."""

from __future__ import annotations

import numpy as np

from vltools.io.embeddings import write_embeddings


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def clustered(rng: np.random.Generator, n: int, dims: int, clusters: int, spread: float = 0.3) -> np.ndarray:
    """`n` unit rows around `clusters` random unit centres (Gaussian noise of `spread` per coordinate / sqrt(dims))."""
    centres = unit(rng.normal(size=(clusters, dims)))
    noise = rng.normal(size=(n, dims)) * spread / np.sqrt(dims)
    return unit(centres[rng.integers(clusters, size=n)] + noise)


def save(path, prefix: str, rows: np.ndarray, side: str, digest: str = "d1") -> list[str]:
    """Write `rows` as an embeddings file of `side` with ids prefix0, prefix1, ...; return the ids."""
    ids = [f"{prefix}{k}" for k in range(len(rows))]
    image_ids = [f"i{k}" for k in range(len(rows))] if side == "captions" else None
    write_embeddings(path, ids, [rows], {"side": side, "model": "vse", "checkpoint": "vse.pt",
                                         "checkpoint_digest": digest}, caption_image_ids=image_ids)
    return ids

"""A tiny learnable matching world for the trainer tests: each image shows two of ten concepts.

Image i's first two regions are noisy copies of its two concepts' prototype vectors (the other
regions are noise); its five captions name the same two concepts in varied templates. Pairs of
concepts are unique per image, so a model that learns the concept-word link can retrieve them.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from vltools.io.features import FeaturesWriter
from vltools.io.records import write_records

CONCEPTS = ["red", "blue", "green", "cube", "ball", "cone", "dog", "cat", "tree", "car"]
TEMPLATES = ["a {} and a {}", "there is a {} next to a {}", "{} with {}", "the {} is near the {}",
             "a photo of a {} and {}"]
REGIONS, DIM = 4, 16

# tiny model settings every trainer test uses (the official sizes are far too slow for unit tests)
TINY = ["--set", "model.embed_size=32", "--set", "model.word_dim=16"]
TINY_SGR = [*TINY, "--set", "model.sim_dim=16", "--set", "model.sgr_step=1"]


def make_world(folder: Path, n_images: int = 45, n_val: int = 20, seed: int = 0) -> tuple[Path, Path]:
    """Write `folder/feats.h5` and `folder/caps.jsonl` (the last `n_val` images form split "val")."""
    rng = np.random.default_rng(seed)
    prototypes = rng.normal(size=(len(CONCEPTS), DIM))
    pairs = list(itertools.combinations(range(len(CONCEPTS)), 2))
    chosen = [pairs[i] for i in rng.permutation(len(pairs))[:n_images]]
    ids = [f"img{i:03d}" for i in range(n_images)]
    regions = 0.3 * rng.normal(size=(n_images, REGIONS, DIM))
    records = []
    for i, (a, b) in enumerate(chosen):
        regions[i, 0] += prototypes[a]
        regions[i, 1] += prototypes[b]
        split = "val" if i >= n_images - n_val else "train"
        for t, template in enumerate(TEMPLATES):
            first, second = (CONCEPTS[a], CONCEPTS[b]) if t % 2 == 0 else (CONCEPTS[b], CONCEPTS[a])
            records.append({"image_id": ids[i], "caption": template.format(first, second), "split": split,
                            "caption_id": f"{ids[i]}_{t}"})
    features, captions = folder / "feats.h5", folder / "caps.jsonl"
    with FeaturesWriter(features, {"backbone": "tiny", "weights": "none", "regions": "synthetic"}) as writer:
        writer.add(ids, regions=regions.astype(np.float32))
    write_records(captions, records)
    return features, captions


def chance_rsum(n_images: int, per_image: int = 5) -> float:
    """Expected rsum of a random ranking: i2t R@K = P(one of an image's captions in the top K), t2i K/n."""
    n_captions = n_images * per_image
    total = 0.0
    for k in (1, 5, 10):
        miss = np.prod([(n_captions - per_image - j) / (n_captions - j) for j in range(k)])
        total += 100 * (1 - miss) + 100 * min(k / n_images, 1.0)
    return total

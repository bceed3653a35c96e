"""Text-only baselines of Birds-to-Words (Forbes et al. 2019; L2C Table 1): descriptions chosen without
looking at the images, from the training descriptions."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from vltools.errors import VLToolsError

BASELINES = ("most-frequent", "text-only")


def most_frequent(texts: Sequence[str]) -> str:
    """The most common training description (exact text); a tie goes to the one seen first."""
    if not texts:
        raise VLToolsError("the most frequent description needs training descriptions; none were given")
    counts = Counter(texts)
    best = max(counts.values())
    return next(text for text in texts if counts[text] == best)


def text_only(texts: Sequence[str], count: int, seed: int = 0) -> list[str]:
    """`count` descriptions sampled (with replacement, seeded) from the training descriptions' empirical
    distribution: a description that occurs n times is drawn with probability n / len(texts)."""
    if not texts:
        raise VLToolsError("text-only sampling needs training descriptions; none were given")
    picks = np.random.default_rng(seed).integers(0, len(texts), size=count)
    return [texts[i] for i in picks]


def baseline_descriptions(name: str, texts: Sequence[str], count: int, seed: int = 0) -> list[str]:
    """`count` descriptions of baseline `name` (see BASELINES)."""
    if name == "most-frequent":
        return [most_frequent(texts)] * count
    if name == "text-only":
        return text_only(texts, count, seed)
    raise VLToolsError(f"unknown baseline {name!r}; use one of {', '.join(BASELINES)}")

"""How many different captions a captioner wrote for its images.

A captioner that writes one caption for most images scores like the most frequent caption and tells the images
apart no better than chance, whatever its BLEU or CIDEr-D say; `CaptionSpread.collapsed` names that case.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class CaptionSpread:
    """`distinct` different captions over `items` images (or pairs); the most common, `top_caption`, for `top`."""

    distinct: int
    items: int
    top: int
    top_caption: str

    @property
    def collapsed(self) -> bool:
        """Whether one caption covers half of the items or more."""
        return self.items > 0 and 2 * self.top >= self.items


def caption_spread(captions: Iterable[str]) -> CaptionSpread:
    """The spread of one caption per item; captions are compared lower-cased, with their words joined by one
    space."""
    counts = Counter(" ".join(text.lower().split()) for text in captions)
    top_caption, top = counts.most_common(1)[0] if counts else ("", 0)
    return CaptionSpread(len(counts), sum(counts.values()), top, top_caption)

"""caption_spread: distinct captions, the most common one, and the collapse rule (half of the items or more)."""

from __future__ import annotations

from vltools.eval.spread import caption_spread


def test_counts_distinct_captions_ignoring_case_and_spacing():
    spread = caption_spread(["a red star", "A red  star", "a blue cross", "a red star ", "two stars"])
    assert (spread.distinct, spread.items, spread.top, spread.top_caption) == (3, 5, 3, "a red star")
    assert spread.collapsed


def test_collapsed_from_half_of_the_items():
    assert caption_spread(["a", "a", "b", "c"]).collapsed            # 2 of 4: half
    assert not caption_spread(["a", "a", "b", "c", "d"]).collapsed   # 2 of 5
    assert not caption_spread([]).collapsed
    assert caption_spread([]).items == 0

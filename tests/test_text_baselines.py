"""Most Frequent and Text-Only baselines against hand counts and the empirical distribution."""

from __future__ import annotations

from collections import Counter

import pytest

from vltools.errors import VLToolsError
from vltools.text.baselines import baseline_descriptions, most_frequent, text_only


def test_most_frequent_is_the_commonest_text_and_ties_go_to_the_first_seen():
    assert most_frequent(["b", "a", "a", "c", "b", "a"]) == "a"
    assert most_frequent(["x", "y", "y", "x"]) == "x"
    assert baseline_descriptions("most-frequent", ["q", "p", "p"], 3) == ["p", "p", "p"]


def test_text_only_follows_the_empirical_distribution_and_is_seeded():
    texts = ["a"] * 6 + ["b"] * 3 + ["c"]
    drawn = text_only(texts, 20000, seed=1)
    counts = Counter(drawn)
    for text, share in (("a", 0.6), ("b", 0.3), ("c", 0.1)):
        assert abs(counts[text] / 20000 - share) < 0.015
    assert text_only(texts, 50, seed=1) == drawn[:50]
    assert text_only(texts, 50, seed=2) != drawn[:50]


def test_baselines_refuse_empty_training_text_and_unknown_names():
    with pytest.raises(VLToolsError, match="none were given"):
        most_frequent([])
    with pytest.raises(VLToolsError, match="unknown baseline"):
        baseline_descriptions("oracle", ["a"], 1)

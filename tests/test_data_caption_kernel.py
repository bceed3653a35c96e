"""vltools.data.caption_kernel: the match kernel K written out by hand, over METEOR (scored pair by pair by
pycocoevalcap itself) and over a table of sentence scores where K is exact; the rankings it gives."""

from __future__ import annotations

import numpy as np
import pytest

from vltools.data.caption_kernel import caption_kernel, image_captions, kernel_rankings, triplet_pairs
from vltools.errors import VLToolsError
from vltools.eval.caption import meteor_pairs


def test_kernel_over_meteor_is_the_formula_over_pycocoevalcaps_scores():
    from pycocoevalcap.meteor.meteor import Meteor

    x1, x2, y1 = "a man rides a brown horse on the beach", "a horse eats grass", "a man riding a horse"
    meteor = Meteor()
    m11 = meteor.compute_score({"0": [y1]}, {"0": [x1]})[1][0]    # M(x, y): x the hypothesis, y the reference
    m21 = meteor.compute_score({"0": [y1]}, {"0": [x2]})[1][0]
    expected = (m11 + m21 + max(m11, m21)) / (2 + 1)    # rows x1, x2 (one y each), then the column y1
    kernel = caption_kernel({"p": [x1, x2], "q": [y1]}, [("p", "q")], meteor_pairs, "caps.jsonl")
    assert kernel == pytest.approx([expected], abs=1e-12)
    assert 0 < m21 < m11 < 1


TABLE = {("a", "c"): 0.5, ("a", "d"): 0.25, ("a", "e"): 0.0,
         ("b", "c"): 0.125, ("b", "d"): 0.75, ("b", "e"): 0.5,
         ("c", "a"): 1.0, ("d", "a"): 0.0, ("e", "a"): 0.0, ("c", "b"): 0.0, ("d", "b"): 0.0, ("e", "b"): 0.0}


def test_kernel_over_a_table_is_exact_and_asks_every_pair_in_one_call():
    calls = []

    def table(pairs):
        calls.append(list(pairs))
        return TABLE

    captions = {"p": ["a", "b"], "q": ["c", "d", "e"]}
    kernel = caption_kernel(captions, [("p", "q"), ("q", "p"), ("p", "q")], table, "caps.jsonl")
    # K(p, q): rows a, b: max 0.5 + max 0.75; columns c, d, e: 0.5 + 0.75 + 0.5; over |X| + |Y| = 5
    # K(q, p): rows c, d, e: 1.0 + 0 + 0; columns a, b: 1.0 + 0; over 5
    assert kernel.tolist() == [(0.5 + 0.75 + 0.5 + 0.75 + 0.5) / 5, (1.0 + 1.0) / 5, 0.6]
    assert len(calls) == 1 and len(calls[0]) == 18 and set(calls[0]) == set(TABLE)


def test_images_without_captions_are_named_before_anything_is_scored():
    def never(pairs):
        raise AssertionError("scored")

    with pytest.raises(VLToolsError, match=r"^caps.jsonl: 2 images of the pairs have no caption: 'r', 's'; give"):
        caption_kernel({"p": ["a"], "q": ["c"], "s": []}, [("p", "q"), ("p", "r"), ("s", "q")], never, "caps.jsonl")


def test_rankings_list_each_querys_images_best_first():
    pairs = [("q1", "a"), ("q1", "b"), ("q2", "a"), ("q1", "c")]
    records = kernel_rankings(pairs, np.array([0.2, 0.5, 0.1, 0.5]))
    assert records == [{"query": "q1", "direction": "i2i", "ids": ["b", "c", "a"], "scores": [0.5, 0.5, 0.2]},
                       {"query": "q2", "direction": "i2i", "ids": ["a"], "scores": [0.1]}]


def test_pairs_and_captions_of_records():
    triplets = [{"query": "q", "a": "x", "b": "y"}, {"query": "q", "a": "y", "b": "z"}, {"query": "r", "a": "x",
                                                                                         "b": "q"}]
    assert triplet_pairs(triplets) == [("q", "x"), ("q", "y"), ("q", "z"), ("r", "x"), ("r", "q")]
    records = [{"image_id": "p", "caption": "a"}, {"image_id": "q", "caption": "c"}, {"image_id": "p", "caption": "b"}]
    assert image_captions(records) == {"p": ["a", "b"], "q": ["c"]}

"""The world's object labels: one word per attribute value, four per object, positions mirrored by a flip."""

from __future__ import annotations

import numpy as np

from vltools.synth.labels import ATTRIBUTES, LABELS, attribute_columns, mirrored, object_targets


def test_labels_are_the_caption_words_each_naming_one_attribute():
    assert len(LABELS) == len(set(LABELS)) == 6 + 7 + 2 + 9
    assert {"star", "purple", "large", "bottom right", "middle"} <= set(LABELS)
    columns = attribute_columns()
    assert sorted(k for cols in columns.values() for k in cols) == list(range(len(LABELS)))
    assert [LABELS[k] for k in columns["size"]] == ["small", "large"]


def test_a_flip_mirrors_left_and_right_only():
    assert [mirrored(p) for p in ("top left", "top", "top right", "left", "middle", "right", "bottom left",
                                  "bottom", "bottom right")] == \
        ["top right", "top", "top left", "right", "middle", "left", "bottom right", "bottom", "bottom left"]


def test_object_targets_by_hand():
    objects = [{"shape": "cross", "colour": "black", "size": "small", "position": "top left"},
               {"shape": "circle", "colour": "red", "size": "large", "position": "middle"}]
    for flipped, first in ((False, "top left"), (True, "top right")):
        targets = object_targets(objects, flipped)
        assert targets.dtype == np.float32 and targets.shape == (2, len(LABELS))
        assert [LABELS[k] for k in np.flatnonzero(targets[0])] == ["cross", "black", "small", first]
        assert [LABELS[k] for k in np.flatnonzero(targets[1])] == ["circle", "red", "large", "middle"]
    assert set(ATTRIBUTES) == {"shape", "colour", "size", "position"}

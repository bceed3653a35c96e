"""vltools.io.fields: a field of a vltools file is returned as plain Python when it has its kind, and a wrong kind,
a missing field or an intermediate that is no mapping is one line naming the file, the field and what to do."""

from __future__ import annotations

import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.io.fields import INTEGER, MAPPING, NUMBER, TEXT, TEXTS, field, optional


def refused(values, key, kind, **options) -> str:
    with pytest.raises(VLToolsError) as caught:
        field(values, key, kind, "f.pt", "write it again", **options)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("f.pt: ") and message.endswith("; write it again")
    return message


def test_values_of_their_kind_come_back_as_plain_python():
    values = {"dims": np.int64(32), "name": b"Flat", "ratio": np.float32(0.5), "words": ("a", "b"), "none": None}
    assert field(values, "dims", INTEGER, "f", "") == 32 and type(field(values, "dims", INTEGER, "f", "")) is int
    assert field(values, "name", TEXT, "f", "") == "Flat"
    assert field(values, "ratio", NUMBER, "f", "") == 0.5
    assert field(values, "words", TEXTS, "f", "") == ["a", "b"]
    assert field(values, "none", optional(TEXT), "f", "") is None
    assert field(values, "absent", INTEGER, "f", "", default=7) == 7


@pytest.mark.parametrize(("value", "kind", "shown"), [
    ("32x", INTEGER, "'32x' (str), not an integer"), (True, INTEGER, "True (bool), not an integer"),
    (None, MAPPING, "None, not a mapping"), (5, TEXTS, "5 (int), not a list of strings"),
    (["a", 1], TEXTS, "['a', 1] (list), not a list of strings"), (b"\xff", TEXT, "b'\\xff' (bytes), not a string"),
    ("x" * 100, NUMBER, f"'{'x' * 27}...{'x' * 28}' (str), not a number")])
def test_a_value_of_another_kind_is_named_with_its_type(value, kind, shown):
    assert refused({"key": value}, "key", kind) == f"f.pt: field 'key' is {shown}; write it again"


def test_dotted_keys_walk_nested_mappings_and_name_what_is_missing_or_no_mapping():
    values = {"train_state": {"config": {"task": {"image_size": 576}}, "inputs": [1]}}
    assert field(values, "train_state.config.task.image_size", INTEGER, "f", "") == 576
    assert field(values, "train_state.config.model.size", INTEGER, "f", "", default=3) == 3
    assert refused(values, "train_state.inputs.tokenizer", TEXT, default=None) == \
        "f.pt: field 'train_state.inputs' is [1] (list), not a mapping; write it again"
    assert refused(values, "train_state.optimizer", MAPPING, what="attribute") == \
        "f.pt: lacks the attribute 'train_state.optimizer'; write it again"

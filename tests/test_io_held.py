"""Which kind of file a value given in memory stands for, without numpy: records, a JSON document, features or
embeddings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from vltools.io.held import Embeddings, FeaturesInMemory, held, in_memory

RECORDS = [{"image_id": "1", "caption": "a dog"}, {"image_id": 2, "caption": "två katter"}]


def test_what_counts_as_records_in_memory():
    assert in_memory(RECORDS) and in_memory(tuple(RECORDS)) and in_memory({"annotations": []})
    assert not any(in_memory(value) for value in ([], "caps.jsonl", Path("caps.jsonl"), [RECORDS[0], "x"], None))


def test_the_kind_of_each_value():
    embeddings = Embeddings(["a"], np.zeros((1, 3)), "images")
    assert [held(value) for value in (RECORDS, {"annotations": []}, {"ids": ["a"], "regions": np.zeros((1, 2, 2))},
                                      embeddings, "caps.jsonl", [], 5)] == \
        ["records", "document", "features", "embeddings", None, None, None]
    assert repr(embeddings) == "Embeddings(images, 1 x 3, no model)"
    assert repr(Embeddings(["a", "b"], np.zeros((2, 4)), "captions", attrs={"model": "vse"})) == \
        "Embeddings(captions, 2 x 4, vse)"
    # quoted by the error refusing them
    assert repr(Embeddings(["a"], np.zeros((1, 4)), "images", attrs=None)) == "Embeddings(images, 1 x 4, no model)"


def test_features_in_memory_are_called_by_their_name_and_hold_their_datasets():
    regions = np.zeros((1, 2, 3), dtype=np.float32)
    features = FeaturesInMemory("first (in memory)", {"ids": np.array(["a"], dtype=object), "regions": regions},
                                {"dtype": "float32"})
    assert str(features) == "first (in memory)" and f"{features}: image id 'a'" == "first (in memory): image id 'a'"
    assert "regions" in features and "boxes" not in features and features["regions"] is regions
    features.close()
    assert features["ids"].tolist() == ["a"]


def test_asking_imports_no_numpy():
    code = "import sys, vltools.io.held, vltools.infer.checks; print('numpy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
